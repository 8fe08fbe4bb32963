// A bench-only allocation profile of a replica process: with SBX_BENCH_ALLOC_PROFILE_DIR set,
// each SIGWINCH toggles V8's sampling heap profiler, counting objects later collected too (so
// garbage shows where it was allocated), and the stop writes `alloc-<identity>-<n>.heapprofile`
// (Chrome DevTools' format) into that directory. bench/k8s/scale.ts --alloc-profile DIR sends the
// signals around each streaming round.
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { join } from "node:path";

export function installAllocProfiler(identity: string, dir = process.env.SBX_BENCH_ALLOC_PROFILE_DIR): void {
  if (!dir) return;
  const session = new Session();
  session.connect();
  let on = false;
  let n = 0;
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res))),
    );
  process.on("SIGWINCH", () => {
    const step = on
      ? post("HeapProfiler.stopSampling").then((res) => {
          const file = join(dir, `alloc-${identity}-${++n}.heapprofile`);
          writeFileSync(file, JSON.stringify((res as { profile: unknown }).profile));
        })
      : post("HeapProfiler.startSampling", {
          samplingInterval: 64 * 1024,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true,
        });
    on = !on;
    step.catch((err) => process.stderr.write(`alloc profile: ${String(err)}\n`));
  });
}
