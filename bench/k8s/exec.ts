// Exec round trip on the Kubernetes backend: `true` in a ready sandbox, sequentially and with
// concurrent callers, through the Manager (websocket exec via the API server to the node).
//   npx tsx bench/k8s/exec.ts [--samples 200] [--concurrency 10]
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { Exec } from "@kubernetes/client-node";
import { SANDBOX_CONTAINER } from "../../runtime/k8s/contract.ts";
import { arg, benchRuntime, stats, table } from "./env.ts";

const samples = Number(arg("samples", "200"));
const concurrency = Number(arg("concurrency", "10"));
const rt = await benchRuntime("bench-exec", { defaults: { size: "nano", idleTimeoutSeconds: 0 } }, 0);
const run = async (owner: string, id: string, command: string[]) => {
  const t0 = performance.now();
  const s = await rt.manager.exec(owner, id, { command });
  s.stdout.resume();
  s.stderr.resume();
  await s.result;
  return performance.now() - t0;
};
const rows = [];
let out: unknown;
try {
  const sb = await rt.manager.create({ owner: "bench", profile: "base", size: "nano" });
  await rt.manager.wait("bench", sb.id, { timeoutMs: 60_000 });
  for (let i = 0; i < 5; i++) await run("bench", sb.id, ["true"]); // warm-up
  const seq: number[] = [];
  for (let i = 0; i < samples; i++) seq.push(await run("bench", sb.id, ["true"]));
  rows.push({ mode: "sequential", ...stats(seq) });
  const conc: number[] = [];
  let left = samples;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) conc.push(await run("bench", sb.id, ["true"]));
    }),
  );
  rows.push({ mode: `${concurrency} concurrent`, ...stats(conc) });
  const withEnv: number[] = [];
  for (let i = 0; i < Math.min(50, samples); i++) {
    const t0 = performance.now();
    const s = await rt.manager.exec("bench", sb.id, {
      command: ["sh", "-c", "echo $X"],
      env: { X: "1" },
      cwd: "/tmp",
      timeoutMs: 10_000,
    });
    s.stdout.resume();
    s.stderr.resume();
    await s.result;
    withEnv.push(performance.now() - t0);
  }
  rows.push({ mode: "sh with env, cwd, timeout", ...stats(withEnv) });
  // Baseline in the same run: client-node's Exec straight at the pod, no Manager, no wrapper.
  const raw: number[] = [];
  const exec = new Exec(rt.clients.kc);
  for (let i = 0; i < Math.min(50, samples); i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve, reject) => {
      exec
        .exec(
          rt.ns.sandboxes,
          sb.id,
          SANDBOX_CONTAINER,
          ["true"],
          new PassThrough(),
          new PassThrough(),
          null,
          false,
          () => resolve(),
        )
        .catch(reject);
    });
    raw.push(performance.now() - t0);
  }
  rows.push({ mode: "baseline: bare client-node Exec", ...stats(raw) });
  out = { bench: "k8s-exec", samples, concurrency, rows };
} finally {
  await rt.close();
}
console.log(JSON.stringify(out, null, 2));
console.log(table(rows.map((r) => ({ mode: r.mode, n: r.n, "p50 ms": r.p50, "p99 ms": r.p99, "max ms": r.max }))));
process.exit(0);
