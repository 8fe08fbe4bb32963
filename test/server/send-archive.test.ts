// sendArchive (runtime/server/files.ts) when the producer fails AFTER writing a well-formed
// archive, which is what GNU tar does on an unreadable file (it writes the end-of-archive
// marker, then exits 2): the case that made `GET /files?path=/etc/shadow` look like an empty
// success. The download check now refuses such paths up front, so no sandbox path reaches this
// deterministically; the producer here replays real `tar -c` bytes and then errors, as the
// backends' archive streams do when tar exits non-zero. Real fastify, real socket, node:http.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HELD_TAIL_BYTES } from "../../runtime/core/heldTail.ts";
import { sendArchive } from "../../runtime/server/files.ts";

let work: string;
let app: FastifyInstance;
let url: string;
const archives: Record<string, Buffer> = {};

/** A real archive of one file of `bytes` random bytes (GNU tar, default 10 KiB records). */
function tarOf(name: string, bytes: number): Buffer {
  writeFileSync(join(work, name), Buffer.alloc(bytes, 7));
  return execFileSync("tar", ["-C", work, "-cf", "-", name]);
}

/** The archive in 64 KiB pieces, then (if fail) an error instead of the end, like a tar that exited 2. */
function producer(archive: Buffer, fail: boolean): Readable {
  return Readable.from(
    (async function* () {
      for (let at = 0; at < archive.length; at += 65536) yield archive.subarray(at, at + 65536);
      await new Promise((r) => setImmediate(r));
      if (fail) throw new Error("tar exited 2: Cannot open: Permission denied");
    })(),
  );
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-send-archive-"));
  archives.big = tarOf("big.bin", 2 * HELD_TAIL_BYTES);
  archives.small = tarOf("small.txt", 100);
  app = Fastify({ logger: false });
  app.get<{ Params: { which: string; fail: string } }>("/:which/:fail", async (req, reply) =>
    sendArchive(reply, producer(archives[req.params.which], req.params.fail === "fail")),
  );
  url = await app.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  await app?.close();
  rmSync(work, { recursive: true, force: true });
});

function get(
  path: string,
): Promise<{ status: number; body: Buffer; complete: boolean; trailer?: string; error?: string }> {
  return new Promise((resolve, reject) => {
    request(`${url}${path}`, (res) => {
      const chunks: Buffer[] = [];
      let error: string | undefined;
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("error", (e) => (error = e.message));
      res.on("close", () =>
        resolve({
          status: res.statusCode!,
          body: Buffer.concat(chunks),
          complete: res.complete,
          trailer: res.trailers["sbx-archive"],
          error,
        }),
      );
    })
      .on("error", reject)
      .end();
  });
}

function tarAccepts(bytes: Buffer): boolean {
  const file = join(work, `got-${Math.random()}.tar`);
  writeFileSync(file, bytes);
  return spawnSync("tar", ["-tf", file]).status === 0;
}

describe("sendArchive", () => {
  it("a producer that succeeds: every byte, a clean end and the trailer", async () => {
    const r = await get("/big/ok");
    expect(r).toMatchObject({ status: 200, complete: true, trailer: "complete" });
    expect(r.body.equals(archives.big)).toBe(true);
  });

  it("a producer that fails after a well-formed archive: the response is cut and its bytes are no archive", async () => {
    const r = await get("/big/fail");
    expect(r.status).toBe(200);
    expect(r.complete).toBe(false);
    expect(r.error).toBe("aborted");
    expect(r.trailer).toBeUndefined();
    // the end-of-archive marker never left the service: tar rejects what arrived
    expect(r.body.length).toBeLessThanOrEqual(archives.big.length - HELD_TAIL_BYTES);
    expect(tarAccepts(archives.big), "the producer's archive itself is well formed").toBe(true);
    expect(tarAccepts(r.body), "what the client got must not pass as an archive").toBe(false);
  });

  it("an HTTP/1.0 client (no chunked encoding, so no trailer) gets the archive and a clean close", async () => {
    const { port } = new URL(url);
    const raw = await new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      const sock = connect(Number(port), "127.0.0.1", () => sock.end("GET /big/ok HTTP/1.0\r\n\r\n"));
      sock.on("data", (c) => chunks.push(c));
      sock.on("error", reject);
      sock.on("close", () => resolve(Buffer.concat(chunks)));
    });
    const split = raw.indexOf("\r\n\r\n");
    const head = raw.subarray(0, split).toString();
    expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(head.toLowerCase()).not.toContain("trailer");
    expect(raw.subarray(split + 4).equals(archives.big)).toBe(true);
  });

  it("a small archive is held whole, so its failure is an error status, not a 200", async () => {
    const r = await get("/small/fail");
    expect(r.status).toBe(500); // bare fastify here; the service's handler maps it (502 for upstream errors)
    expect(r.body.toString()).toContain("tar exited 2");
    expect(tarAccepts(r.body)).toBe(false);
  });
});
