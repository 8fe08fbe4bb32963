// The OCI client against a real docker-registry on loopback.
import { createHash, randomBytes } from "node:crypto";
import { open, readdir } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, UpstreamError } from "../../runtime/core/errors.ts";
import { DigestMismatchError } from "../../runtime/snapshot/digest.ts";
import { OCI_MANIFEST, OciClient } from "../../runtime/snapshot/oci.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

/** `total` random bytes in 1 MiB pieces; the sha256 is known once the stream ended. */
function randomStream(total: number): { stream: Readable; digest: () => string } {
  const hash = createHash("sha256");
  let left = total;
  let final = "";
  const stream = new Readable({
    read() {
      if (left === 0) {
        final = `sha256:${hash.digest("hex")}`;
        this.push(null);
        return;
      }
      const piece = randomBytes(Math.min(left, 1 << 20));
      left -= piece.length;
      hash.update(piece);
      this.push(piece);
    },
  });
  return { stream, digest: () => final };
}

async function sha256Of(stream: Readable): Promise<{ digest: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  for await (const p of stream as AsyncIterable<Buffer>) {
    hash.update(p);
    size += p.length;
  }
  return { digest: `sha256:${hash.digest("hex")}`, size };
}

let registry: TestRegistry;
beforeAll(async () => {
  registry = await startRegistry();
});
afterAll(async () => {
  await registry?.stop();
});

describe("OciClient blobs", () => {
  it("round-trips a 256 MiB stream byte for byte with bounded memory", async () => {
    const client = new OciClient({ registry: registry.url, chunkBytes: 8 << 20 });
    const total = 256 * 1024 * 1024 + 12345;
    const src = randomStream(total);
    const rss0 = process.memoryUsage().rss;
    let peak = rss0;
    const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    let progress = 0;
    const pushed = await client.pushBlob("it/roundtrip", src.stream, { onProgress: (b) => (progress = b) });
    expect(pushed).toEqual({ digest: src.digest(), size: total });
    expect(progress).toBe(total);
    expect(await client.blobExists("it/roundtrip", pushed.digest)).toBe(true);
    const back = await sha256Of(await client.pullBlob("it/roundtrip", pushed.digest, { size: total }));
    clearInterval(sample);
    expect(back).toEqual({ digest: pushed.digest, size: total });
    // one 8 MiB chunk plus stream buffers; the payload itself is 256 MiB
    expect(peak - rss0).toBeLessThan(96 << 20);
    client.close();
  });

  it("pushes a source whose last piece spans several chunks before it commits", async () => {
    // the source ends while the last piece still waits for upload slots: the commit must wait
    // too (it went out before the last PATCH, or without the remainder, before the fix)
    const client = new OciClient({ registry: registry.url, chunkBytes: 1 << 20 });
    try {
      for (const pieces of [[randomBytes((3 << 20) + 77)], [randomBytes(1 << 16), randomBytes(3 << 20)]]) {
        const whole = Buffer.concat(pieces);
        const pushed = await client.pushBlob("it/big-piece", Readable.from(pieces));
        expect(pushed).toEqual({
          digest: `sha256:${createHash("sha256").update(whole).digest("hex")}`,
          size: whole.length,
        });
        expect(await sha256Of(await client.pullBlob("it/big-piece", pushed.digest))).toEqual(pushed);
      }
    } finally {
      client.close();
    }
  });

  it("pushes an empty blob", async () => {
    const client = new OciClient({ registry: registry.url });
    const pushed = await client.pushBlob("it/empty", Readable.from([]));
    expect(pushed).toEqual({ digest: `sha256:${createHash("sha256").digest("hex")}`, size: 0 });
    expect(await sha256Of(await client.pullBlob("it/empty", pushed.digest, { size: 0 }))).toEqual(pushed);
    client.close();
  });

  it("fails a pull whose bytes do not match the digest (corrupted registry storage)", async () => {
    const client = new OciClient({ registry: registry.url });
    const data = randomBytes(3 << 20);
    const pushed = await client.pushBlob("it/corrupt", Readable.from([data]));
    const hex = pushed.digest.slice("sha256:".length);
    const file = join(registry.storageDir, "docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
    const fh = await open(file, "r+");
    await fh.write(Buffer.from([data[1000] ^ 0xff]), 0, 1, 1000);
    await fh.close();
    await expect(sha256Of(await client.pullBlob("it/corrupt", pushed.digest))).rejects.toThrow(DigestMismatchError);
    await expect(sha256Of(await client.pullBlob("it/corrupt", pushed.digest))).rejects.toThrow(
      /does not match its digest \(expected sha256:/,
    );
    client.close();
  });

  it("answers NotFound for a missing blob", async () => {
    const client = new OciClient({ registry: registry.url });
    await expect(client.pullBlob("it/missing", `sha256:${"0".repeat(64)}`)).rejects.toThrow(NotFoundError);
    client.close();
  });
});

/** A TCP proxy in front of the registry that cuts the first PATCH after forwarding `afterBytes` of it. */
async function faultyProxy(
  target: string,
  afterBytes: number,
): Promise<{ url: string; cuts: () => number; close: () => Promise<void> }> {
  const [host, port] = target.split(":");
  let cut = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), host);
    sockets.add(client).add(upstream);
    let inPatch = -1;
    client.on("data", (d: Buffer) => {
      if (cut === 0 && inPatch < 0) {
        const at = d.indexOf("PATCH ");
        if (at >= 0) inPatch = -at; // bytes of this PATCH forwarded so far, counted from its start
      }
      if (cut === 0 && inPatch !== -1 && inPatch + d.length > afterBytes) {
        const keep = Math.max(0, afterBytes - inPatch);
        if (keep > 0) upstream.write(d.subarray(0, keep));
        cut++;
        setTimeout(() => {
          client.destroy();
          upstream.destroy();
        }, 50);
        return;
      }
      if (inPatch !== -1 && cut === 0) inPatch += d.length;
      upstream.write(d);
    });
    upstream.on("data", (d) => client.write(d));
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    client.on("error", () => undefined);
    upstream.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const p = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${p}`,
    cuts: () => cut,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

describe("OciClient chunked upload failures", () => {
  it("resends a chunk the registry never received and completes the blob", async () => {
    const proxy = await faultyProxy(registry.host, 0);
    const client = new OciClient({ registry: proxy.url, chunkBytes: 1 << 20 });
    const src = randomStream((5 << 20) + 7);
    const pushed = await client.pushBlob("it/resume", src.stream);
    expect(proxy.cuts()).toBe(1);
    expect(pushed.digest).toBe(src.digest());
    const direct = new OciClient({ registry: registry.url });
    expect(await sha256Of(await direct.pullBlob("it/resume", pushed.digest))).toEqual(pushed);
    client.close();
    direct.close();
    await proxy.close();
  });

  it("fails cleanly when a chunk arrived in part, and commits no blob", async () => {
    const proxy = await faultyProxy(registry.host, 300_000);
    const client = new OciClient({ registry: proxy.url, chunkBytes: 1 << 20, chunkRetries: 3 });
    const src = randomStream(4 << 20);
    const err = await client.pushBlob("it/partial", src.stream).catch((e: unknown) => e);
    expect(proxy.cuts()).toBe(1);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(String((err as Error).message)).toMatch(/blob upload to it\/partial failed at byte 0 .*retry the pause/);
    // the stranded upload is never a blob: nothing under the repository's layer links
    const layers = await readdir(
      join(registry.storageDir, "docker/registry/v2/repositories/it/partial/_layers/sha256"),
    ).catch(() => []);
    expect(layers).toEqual([]);
    expect(
      await readdir(join(registry.storageDir, "docker/registry/v2/repositories/it/partial/_uploads")),
    ).toHaveLength(1);
    client.close();
    await proxy.close();
  });
});

describe("OciClient manifests", () => {
  it("puts, heads, gets and deletes an artifact manifest", async () => {
    const client = new OciClient({ registry: registry.url });
    const layer = await client.pushBlob("it/manifest", Readable.from([Buffer.from("layer bytes")]));
    const config = await client.pushSmallBlob("it/manifest", Buffer.from('{"sandbox":"s1"}'));
    const manifest = {
      schemaVersion: 2 as const,
      mediaType: OCI_MANIFEST as typeof OCI_MANIFEST,
      artifactType: "application/vnd.sbx.snapshot.v1",
      config: { mediaType: "application/vnd.sbx.snapshot.config.v1+json", digest: config.digest, size: config.size },
      layers: [
        {
          mediaType: "application/vnd.sbx.snapshot.layer.v1.tar",
          digest: layer.digest,
          size: layer.size,
          annotations: { "dev.sbx.path": "/workspace" },
        },
      ],
    };
    const put = await client.putManifest("it/manifest", "s1-1", manifest);
    expect(await client.headManifest("it/manifest", "s1-1")).toEqual(put);
    const got = await client.getManifest("it/manifest", put.digest);
    expect(got.manifest).toEqual(manifest);
    expect((await client.getSmallBlob("it/manifest", config.digest)).toString()).toBe('{"sandbox":"s1"}');
    await client.deleteManifest("it/manifest", put.digest);
    expect(await client.headManifest("it/manifest", "s1-1")).toBeUndefined();
    await expect(client.getManifest("it/manifest", put.digest)).rejects.toThrow(NotFoundError);
    client.close();
  });
});
