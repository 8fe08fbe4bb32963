// The helper's `blob push` and `blob pull` (tools/local-helper/blob.c), run on the host against
// the real registry: the layer it pushes is byte for byte the one the replica's path makes
// (tar through DropRootEntry), a pull restores the tree and refuses a blob whose digest differs,
// the Authorization line goes to the registry's own host only and never into a message, and each
// failure has its exit code (runtime/k8s/podLayers.ts decides on them).
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureHelperBinary } from "../../runtime/local/helperBinary.ts";
import { DropRootEntry } from "../../runtime/snapshot/tarFilter.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

let helper: string;
let registry: TestRegistry;
let dir: string;

beforeAll(async () => {
  helper = await ensureHelperBinary();
  registry = await startRegistry();
  dir = await mkdtemp(join(tmpdir(), "sbx-blob-"));
}, 120_000);

afterAll(async () => {
  await registry?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], stdin = "", env: Record<string, string> = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(helper, ["blob", ...args], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.on("error", () => undefined); // a helper that exits without reading its stdin
    child.stdin.end(stdin);
  });
}

/** what the replica's path pushes for `root` under `parent`: tar, then DropRootEntry */
async function replicaLayer(parent: string, root: string): Promise<{ digest: string; size: number; entries: number }> {
  const tar = spawn("tar", ["-c", "-f", "-", "-C", parent, "--", root], { stdio: ["ignore", "pipe", "inherit"] });
  const filter = new DropRootEntry(root);
  tar.stdout.pipe(filter);
  const hash = createHash("sha256");
  let size = 0;
  for await (const c of filter as AsyncIterable<Buffer>) {
    hash.update(c);
    size += c.length;
  }
  return { digest: `sha256:${hash.digest("hex")}`, size, entries: filter.entries };
}

const uploads = (repo: string) => `${registry.url}/v2/${repo}/blobs/uploads/`;

describe("blob push and pull against the registry", () => {
  let pushed: { digest: string; size: number; entries: number };
  let src: string;

  it("push makes the replica's layer (root entry dropped, entries counted), with progress", async () => {
    src = join(dir, "src");
    await mkdir(join(src, "workspace", "deep", "er"), { recursive: true });
    const big = Buffer.alloc(40 << 20);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE((i * 2654435761) >>> 0, i);
    await writeFile(join(src, "workspace", "deep", "big.bin"), big);
    await writeFile(join(src, "workspace", "deep", "er", "odd.bin"), "x".repeat(4097));
    await writeFile(join(src, "workspace", "with space.py"), "print(42)\n");
    await symlink("deep/big.bin", join(src, "workspace", "link"));
    const r = await run([
      "push",
      "--url",
      uploads("blob-test"),
      "--chunk-bytes",
      String(4 << 20),
      "--tar-root",
      "workspace",
      "--",
      "tar",
      "-c",
      "-f",
      "-",
      "-C",
      src,
      "--",
      "workspace",
    ]);
    expect(r.code, r.stderr).toBe(0);
    pushed = JSON.parse(r.stdout);
    expect(pushed).toEqual(await replicaLayer(src, "workspace"));
    expect(pushed.entries).toBe(6); // deep/, deep/er/, big.bin, odd.bin, with space.py, link
    expect(r.stderr).toMatch(/^sbx-progress \d+$/m);
    // the default: one PATCH streamed as the archive comes, not parts of --chunk-bytes; and with
    // the plain SHA-256 rounds too, where the CPU's SHA extensions are used by default
    const tar = ["tar", "-c", "-f", "-", "-C", src, "--", "workspace"];
    for (const env of [{}, { SBX_SHA256_PLAIN: "1" }] as Record<string, string>[]) {
      const streamed = await run(
        ["push", "--url", uploads("blob-stream"), "--tar-root", "workspace", "--", ...tar],
        "",
        env,
      );
      expect(streamed.code, streamed.stderr).toBe(0);
      expect(JSON.parse(streamed.stdout)).toEqual(pushed);
    }
    expect((await fetch(`${registry.url}/v2/blob-stream/blobs/${pushed.digest}`, { method: "HEAD" })).status).toBe(200);
    const res = await fetch(`${registry.url}/v2/blob-test/blobs/${pushed.digest}`);
    const body = Buffer.from(await res.arrayBuffer());
    expect(`sha256:${createHash("sha256").update(body).digest("hex")}`).toBe(pushed.digest);
  });

  it("pull restores the same tree; a blob whose digest differs is refused with 4", async () => {
    const dst = join(dir, "dst");
    await mkdir(dst);
    const pull = (digest: string) =>
      run([
        "pull",
        "--url",
        `${registry.url}/v2/blob-test/blobs/${pushed.digest}`,
        "--digest",
        digest,
        "--size",
        String(pushed.size),
        "--",
        "tar",
        "-x",
        "-f",
        "-",
        "-C",
        dst,
      ]);
    const ok = await pull(pushed.digest);
    expect(ok.code, ok.stderr).toBe(0);
    for (const f of ["deep/big.bin", "deep/er/odd.bin", "with space.py"])
      expect((await readFile(join(dst, "workspace", f))).equals(await readFile(join(src, "workspace", f)))).toBe(true);
    const wrong = `sha256:${"0".repeat(64)}`;
    const bad = await pull(wrong);
    expect(bad.code).toBe(4);
    expect(bad.stderr).toContain(`digest mismatch: got ${pushed.digest}, expected ${wrong}`);
  });
});

describe("the Authorization line", () => {
  let server: Server;
  let other: Server;
  const seen: { url: string; headers: IncomingHttpHeaders }[] = [];
  let base = "";

  beforeAll(async () => {
    // another host:port the blob redirects to, as a registry redirects to object storage
    other = createServer((req, res) => {
      seen.push({ url: req.url!, headers: req.headers });
      res.end("data");
    });
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
    const otherPort = (other.address() as AddressInfo).port;
    server = createServer((req, res) => {
      seen.push({ url: req.url!, headers: req.headers });
      if (req.url!.startsWith("/v2/denied/")) return res.writeHead(401).end("authentication required");
      res.writeHead(307, { location: `http://127.0.0.1:${otherPort}/bucket/blob?X-Signature=abc` }).end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server?.close();
    other?.close();
  });

  it("goes to the registry's host, not to where it redirects", async () => {
    const digest = `sha256:${createHash("sha256").update("data").digest("hex")}`;
    const r = await run(
      ["pull", "--url", `${base}/v2/r/blobs/${digest}`, "--digest", digest, "--auth-stdin", "--", "cat"],
      "Bearer s3cret-token\n",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("data");
    expect(seen.map((s) => [s.url, s.headers.authorization])).toEqual([
      [`/v2/r/blobs/${digest}`, "Bearer s3cret-token"],
      ["/bucket/blob?X-Signature=abc", undefined],
    ]);
  });

  it("a refusal exits 3 with the status and body, never the secret", async () => {
    const r = await run(
      ["push", "--url", `${base}/v2/denied/blobs/uploads/`, "--auth-stdin", "--", "true"],
      "Basic c2VjcmV0\n",
    );
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("POST /v2/denied/blobs/uploads/: the registry answered 401: authentication required");
    expect(r.stderr).not.toContain("c2VjcmV0");
  });
});

describe("size", () => {
  it("the helper stays small: every pod gets a copy over exec when its channel first opens", async () => {
    // an initialized 1 MiB static buffer once put 2 MiB into .data (3.1 MB binary instead of 1 MB)
    expect((await stat(helper)).size).toBeLessThan(1.5 * 1048576);
  });
});

describe("exit codes", () => {
  it("2 when the command fails, 3 when the registry is unreachable, 64 for https and bad usage", async () => {
    const failed = await run(["push", "--url", uploads("blob-test"), "--", "sh", "-c", "exit 5"]);
    expect([failed.code, failed.stderr.trim()]).toEqual([2, "sbx-helper blob push: sh exited 5"]);
    const refused = await run(["push", "--url", "http://127.0.0.1:1/v2/x/blobs/uploads/", "--", "true"]);
    expect(refused.code).toBe(3);
    expect(refused.stderr).toContain("Connection refused");
    const https = await run(["push", "--url", "https://registry.example/v2/x/blobs/uploads/", "--", "true"]);
    expect([https.code, https.stderr]).toEqual([64, expect.stringContaining("https is not built into this helper")]);
    expect((await run(["pull", "--url", `${registry.url}/v2/x/blobs/sha256:00`, "--", "cat"])).code).toBe(64);
  });
});
