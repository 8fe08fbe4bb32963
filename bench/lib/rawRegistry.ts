// Raw throughput of an OCI registry, as the pause/resume benchmarks' baseline: one blob of the
// payload's size pushed from a pre-generated buffer and pulled to nowhere, from this process.
// With `extract`, the blob is a tar of one file, and a third measurement pulls it again into
// `tar -x` on this machine's temp dir: the pull plus writing the bytes to a disk, with no
// sandbox, exec or helper in the way (but this process between the socket and tar).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { RegistryAuth } from "../../runtime/snapshot/auth.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import { BENCH_SEED, shakeBlock } from "./shake.ts";
import { singleFileTar } from "./tar.ts";

/** the repository the raw blobs go under; a token registry's login must cover it (BenchTarget.rawAuth) */
export const RAW_REPOSITORY = "sbx-bench-raw";

export interface RawThroughput {
  bytes: number;
  push_ms: number;
  pull_ms: number;
  push_MBps: number;
  pull_MBps: number;
  /** with `extract`: the pull into `tar -x` on a local disk */
  pull_extract_ms?: number;
  pull_extract_MBps?: number;
}

/** `bytes` of the bench block (one pre-generated block repeated), as is or as a tar of one file. */
function payload(bytes: number, asTar: boolean): Readable {
  const block = shakeBlock(BENCH_SEED, 0, Math.min(bytes, 8 << 20));
  let left = bytes;
  const data = new Readable({
    read() {
      if (left === 0) return void this.push(null);
      const n = Math.min(left, block.length);
      left -= n;
      this.push(n === block.length ? block : block.subarray(0, n));
    },
  });
  return asTar ? singleFileTar("payload.bin", bytes, data) : data;
}

async function pullIntoTar(oci: OciClient, repo: string, digest: string, size: number): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), "sbx-bench-extract-"));
  try {
    const t0 = performance.now();
    const tar = spawn("tar", ["-x", "-f", "-", "-C", dir, "--no-same-owner"], { stdio: ["pipe", "ignore", "pipe"] });
    let stderr = "";
    tar.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    const exited = new Promise<number | null>((resolve) => tar.once("close", (code) => resolve(code)));
    await pipeline(await oci.pullBlob(repo, digest, { size }), tar.stdin);
    const code = await exited;
    if (code !== 0) throw new Error(`raw pull into tar -x: tar exited ${code}: ${stderr.trim()}`);
    return performance.now() - t0;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function rawThroughput(
  registry: string,
  bytes: number,
  auth?: RegistryAuth,
  opts: { extract?: boolean } = {},
): Promise<RawThroughput> {
  const oci = new OciClient({ registry, ...(auth ? { auth } : {}) });
  const repo = `${RAW_REPOSITORY}/${randomBytes(4).toString("hex")}`;
  try {
    // the source costs nothing (one pre-generated block repeated) so this is the registry's own speed
    const t0 = performance.now();
    const { digest, size } = await oci.pushBlob(repo, payload(bytes, !!opts.extract));
    const push = performance.now() - t0;
    const t1 = performance.now();
    await pipeline(await oci.pullBlob(repo, digest, { size }), new Writable({ write: (_c, _e, cb) => cb() }));
    const pull = performance.now() - t1;
    const out: RawThroughput = {
      bytes,
      push_ms: push,
      pull_ms: pull,
      push_MBps: bytes / 1e6 / (push / 1000),
      pull_MBps: bytes / 1e6 / (pull / 1000),
    };
    if (opts.extract) {
      out.pull_extract_ms = await pullIntoTar(oci, repo, digest, size);
      out.pull_extract_MBps = bytes / 1e6 / (out.pull_extract_ms / 1000);
    }
    return out;
  } finally {
    oci.close();
  }
}
