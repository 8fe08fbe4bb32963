// Exec round trip on the Kubernetes backend: `true` in a ready sandbox, sequentially and with
// concurrent callers, through the Manager over the pod's command channel (one long-lived exec,
// runtime/k8s/channel/), and in the same run over the per-exec websocket path (a second backend
// replica with channels off, as in a pod where the helper cannot run), plus a bare client-node
// Exec as the floor of that path.
//   npx tsx bench/k8s/exec.ts [--samples 200] [--concurrency 10]
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { Exec } from "@kubernetes/client-node";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { ExecSession } from "../../runtime/core/types.ts";
import { SANDBOX_CONTAINER } from "../../runtime/k8s/contract.ts";
import { createKubernetesPlatform } from "../../runtime/kubernetes.ts";
import { arg, benchRuntime, stats, table } from "./env.ts";

const samples = Number(arg("samples", "200"));
const concurrency = Number(arg("concurrency", "10"));
const rt = await benchRuntime("bench-exec", { defaults: { size: "nano", idleTimeoutSeconds: 0 } }, 0);
// the per-exec websocket path, measured in the same run: another replica with channels off
const wsBackend = createKubernetesPlatform(
  rt.config,
  { logger: silentLogger(), clock: systemClock, role: "manager" },
  { clients: rt.clients, identity: "bench-websocket", commandChannel: { enabled: false } },
).backend;
await wsBackend.start();
type Start = (id: string, command: string[]) => Promise<ExecSession>;
const viaManager: Start = (id, command) => rt.manager.exec("bench", id, { command });
const viaWebsocket: Start = (id, command) => wsBackend.exec(id, { command });
const timed = async (start: Start, id: string, command: string[]) => {
  const t0 = performance.now();
  const s = await start(id, command);
  s.stdout.resume();
  s.stderr.resume();
  await s.result;
  return performance.now() - t0;
};
async function sequentialAndConcurrent(label: string, start: Start, id: string) {
  for (let i = 0; i < 5; i++) await timed(start, id, ["true"]); // warm-up (opens the channel)
  const seq: number[] = [];
  for (let i = 0; i < samples; i++) seq.push(await timed(start, id, ["true"]));
  rows.push({ mode: `${label}: sequential`, ...stats(seq) });
  const conc: number[] = [];
  let left = samples;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) conc.push(await timed(start, id, ["true"]));
    }),
  );
  rows.push({ mode: `${label}: ${concurrency} concurrent`, ...stats(conc) });
}
const rows: ({ mode: string } & ReturnType<typeof stats>)[] = [];
let out: unknown;
try {
  const sb = await rt.manager.create({ owner: "bench", profile: "base", size: "nano" });
  await rt.manager.wait("bench", sb.id, { timeoutMs: 60_000 });
  await sequentialAndConcurrent("channel", viaManager, sb.id);
  const mode = (await rt.manager.get("bench", sb.id)).commandChannel;
  if (mode !== "helper") throw new Error(`the channel path ran as ${mode}: see the manager's log`);
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
  rows.push({ mode: "channel: sh with env, cwd, timeout", ...stats(withEnv) });
  for (let i = 0; i < 100 && !(await wsBackend.describe(sb.id))?.ready; i++)
    await new Promise((r) => setTimeout(r, 100));
  await sequentialAndConcurrent("websocket", viaWebsocket, sb.id);
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
  await wsBackend.close();
  await rt.close();
}
console.log(JSON.stringify(out, null, 2));
console.log(table(rows.map((r) => ({ mode: r.mode, n: r.n, "p50 ms": r.p50, "p99 ms": r.p99, "max ms": r.max }))));
process.exit(0);
