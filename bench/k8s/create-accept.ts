// Server-side create-accept latency on the Kubernetes backend at 1, 10, 50 and 200 concurrent
// clients. Each client runs whole lifecycles in a closed loop (create -> wait -> exec -> kill),
// the churn shape agents produce, through the Manager the HTTP service calls. Reports accept
// (what the caller waits for), the record's durability lag (accept -> written to the API
// server), wait (accept -> ready) and exec round trip.
// --mode accept-only drops wait and exec (create -> kill), isolating the accept path from the
// API server's and the nodes' load.
//   npx tsx bench/k8s/create-accept.ts [--levels 1,10,50,200] [--seconds 20] [--mode lifecycle|accept-only]
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { arg, benchRuntime, stats, table } from "./env.ts";

const levels = arg("levels", "1,10,50,200").split(",").map(Number);
const seconds = Number(arg("seconds", "20"));
const mode = arg("mode", "lifecycle");
const rt = await benchRuntime(
  "bench-accept",
  { budget: { cpu: "64", memory: "256Gi" }, defaults: { size: "nano", idleTimeoutSeconds: 0 } },
  12,
);
const results = [];
try {
  for (const clients of levels) {
    const accept: number[] = [];
    const wait: number[] = [];
    const exec: number[] = [];
    const errors: Record<string, number> = {};
    const lagStart = rt.platform.testing.records.lagMs.length;
    const eld = monitorEventLoopDelay({ resolution: 1 });
    eld.enable();
    const until = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        while (performance.now() < until) {
          try {
            const t0 = performance.now();
            const sb = await rt.manager.create({ owner: `bench-${c}`, profile: "base", size: "nano" });
            const t1 = performance.now();
            accept.push(t1 - t0);
            if (mode === "accept-only") {
              await new Promise((r) => setTimeout(r, 10));
              await rt.manager.kill(sb.owner, sb.id);
              continue;
            }
            await rt.manager.wait(sb.owner, sb.id, { timeoutMs: 120_000 });
            const t2 = performance.now();
            wait.push(t2 - t1);
            const s = await rt.manager.exec(sb.owner, sb.id, { command: ["true"] });
            s.stdout.resume();
            s.stderr.resume();
            await s.result;
            exec.push(performance.now() - t2);
            await rt.manager.kill(sb.owner, sb.id);
          } catch (err) {
            const code = (err as { code?: string }).code ?? "error";
            errors[code] = (errors[code] ?? 0) + 1;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      }),
    );
    eld.disable();
    const lag = rt.platform.testing.records.lagMs.slice(lagStart);
    const loopDelay = { p50: eld.percentile(50) / 1e6, p99: eld.percentile(99) / 1e6, max: eld.max / 1e6 };
    const row = {
      clients,
      lifecycles: exec.length,
      accept: stats(accept),
      durableLag: stats(lag),
      wait: stats(wait),
      exec: stats(exec),
      loopDelayMs: loopDelay,
      errors,
    };
    results.push(row);
    console.error(`done: ${clients} clients`);
    // let deletes drain before the next level
    for (let i = 0; i < 600 && (await rt.backend.list()).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  }
} finally {
  await rt.close();
}
console.log(JSON.stringify({ bench: "k8s-create-accept", mode, seconds, results }, null, 2));
console.log(
  table(
    results.map((r) => ({
      clients: r.clients,
      lifecycles: r.lifecycles,
      "accept p50 ms": r.accept.p50,
      "accept p99 ms": r.accept.p99,
      "durable p50 ms": r.durableLag.p50,
      "durable p99 ms": r.durableLag.p99,
      "wait p50 ms": r.wait.p50,
      "wait p99 ms": r.wait.p99,
      "exec p50 ms": r.exec.p50,
      "exec p99 ms": r.exec.p99,
      "loop delay p99 ms": Math.round(r.loopDelayMs.p99 * 10) / 10,
      errors: JSON.stringify(r.errors),
    })),
  ),
);
process.exit(0);
