// Raw throughput of an OCI registry, as the pause/resume benchmarks' baseline: one blob of the
// payload's size pushed from a pre-generated buffer and pulled to nowhere, from this process.
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { RegistryAuth } from "../../runtime/snapshot/auth.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import { BENCH_SEED, shakeBlock } from "./shake.ts";

/** the repository the raw blobs go under; a token registry's login must cover it (BenchTarget.rawAuth) */
export const RAW_REPOSITORY = "sbx-bench-raw";

export async function rawThroughput(
  registry: string,
  bytes: number,
  auth?: RegistryAuth,
): Promise<{ bytes: number; push_ms: number; pull_ms: number; push_MBps: number; pull_MBps: number }> {
  const oci = new OciClient({ registry, ...(auth ? { auth } : {}) });
  const repo = `${RAW_REPOSITORY}/${randomBytes(4).toString("hex")}`;
  // the source costs nothing (one pre-generated block repeated) so this is the registry's own speed
  const block = shakeBlock(BENCH_SEED, 0, Math.min(bytes, 8 << 20));
  let left = bytes;
  const source = new Readable({
    read() {
      if (left === 0) return void this.push(null);
      const n = Math.min(left, block.length);
      left -= n;
      this.push(n === block.length ? block : block.subarray(0, n));
    },
  });
  const t0 = performance.now();
  const { digest } = await oci.pushBlob(repo, source);
  const push = performance.now() - t0;
  const t1 = performance.now();
  await pipeline(await oci.pullBlob(repo, digest, { size: bytes }), new Writable({ write: (_c, _e, cb) => cb() }));
  const pull = performance.now() - t1;
  oci.close();
  const pushMs = push;
  return {
    bytes,
    push_ms: pushMs,
    pull_ms: pull,
    push_MBps: bytes / 1e6 / (pushMs / 1000),
    pull_MBps: bytes / 1e6 / (pull / 1000),
  };
}
