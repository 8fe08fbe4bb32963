// One manager holding N live sandboxes on the Kubernetes backend while M streaming execs run
// at once (each prints a line per second for a while), with creates measured during the
// execs: RSS of the manager process, CPU per exec, create-accept p99 under that load, exec
// outcomes. In one run, once per path on the same sandboxes: "channel" through the Manager over
// each pod's command channel (runtime/k8s/channel/; its first use opens it, measured apart),
// and "websocket", a second Manager and backend replica with channels off (one websocket exec
// per command: the old path, today's fallback). Run with --expose-gc to collect garbage between the
// two, so the second path's RSS does not carry the first one's heap.
//   node --expose-gc --import tsx bench/k8s/scale.ts [--sandboxes 1000] [--execs 1000]
//     [--exec-seconds 20] [--paths channel,websocket]
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { buildManager } from "../../runtime/backends.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { ExecRequest, ExecSession } from "../../runtime/core/types.ts";
import { createKubernetesBackend } from "../../runtime/kubernetes.ts";
import { arg, benchRuntime, stats, table } from "./env.ts";

const N = Number(arg("sandboxes", "1000"));
const M = Number(arg("execs", "1000"));
const execSeconds = Number(arg("exec-seconds", "20"));
const paths = arg("paths", "channel,websocket").split(",");
const mib = () => Math.round(process.memoryUsage().rss / 2 ** 20);
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const gc = (globalThis as { gc?: () => void }).gc;
const nodes = Math.ceil((N * 100) / 3600) + 2; // 4-CPU kwok nodes for N x 100m, with slack
const rt = await benchRuntime(
  "bench-scale",
  {
    budget: { cpu: String(Math.ceil(N / 10) + 2), memory: `${N}Gi` },
    defaults: { size: "nano", idleTimeoutSeconds: 0, ttlSeconds: 7200 },
  },
  nodes,
);
type Start = (owner: string, id: string, req: ExecRequest) => Promise<ExecSession>;
const ws = paths.includes("websocket")
  ? createKubernetesBackend(
      rt.config,
      { logger: silentLogger(), clock: systemClock, role: "manager" },
      { clients: rt.clients, identity: "bench-websocket", commandChannel: { enabled: false } },
    )
  : undefined;
// its own Manager, so both paths pay the same per-exec Manager work (audit, activity)
const wsManager = ws
  ? (await buildManager(rt.config, { logger: silentLogger(), clock: systemClock, backend: ws, role: "manager" }))
      .manager
  : undefined;
await wsManager?.start({ reaper: false });
const starts: Record<string, Start> = {
  channel: (owner, id, req) => rt.manager.exec(owner, id, req),
  websocket: (owner, id, req) => wsManager!.exec(owner, id, req),
};
const ticks = Array.from({ length: execSeconds }, (_, i) => `tick ${i + 1}\n`).join("");
const out: Record<string, unknown> = { bench: "k8s-scale", sandboxes: N, execs: M, execSeconds, rssStartMiB: mib() };
const rows: Record<string, string | number | null>[] = [];
type Made = { owner: string; id: string };

/** one exec to its end: "exit N", "timed out", or the error's code */
async function outcome(start: Start, sb: Made, req: ExecRequest, onBytes: (n: number) => void): Promise<string> {
  try {
    const s = await start(sb.owner, sb.id, req);
    s.stdout.on("data", (c: Buffer) => onBytes(c.length));
    s.stderr.resume();
    const r = await s.result;
    return r.timedOut ? "timed out" : `exit ${r.exitCode}`;
  } catch (err) {
    return (err as { code?: string }).code ?? "error";
  }
}

function count(xs: string[]): Record<string, number> {
  const m: Record<string, number> = {};
  for (const k of xs) m[k] = (m[k] ?? 0) + 1;
  return m;
}

/** the peak RSS while fn runs */
async function peakRssOf<T>(fn: () => Promise<T>): Promise<{ value: T; peakRssMiB: number }> {
  let peak = mib();
  const timer = setInterval(() => (peak = Math.max(peak, mib())), 250);
  try {
    return { value: await fn(), peakRssMiB: Math.max(peak, mib()) };
  } finally {
    clearInterval(timer);
  }
}

/** the first command in every sandbox at once: on the channel path, what opens the N channels */
async function openAll(start: Start, made: Made[]) {
  const c0 = cpuMs();
  const t0 = performance.now();
  const { value, peakRssMiB } = await peakRssOf(() =>
    Promise.all(made.map((sb) => outcome(start, sb, { command: ["true"] }, () => undefined))),
  );
  return {
    ms: Math.round(performance.now() - t0),
    cpuMs: Math.round(cpuMs() - c0),
    peakRssMiB,
    outcomes: count(value),
  };
}

/**
 * M streaming execs at once over `start`; with `probe`, creates while they run (their CPU is the
 * Manager's, so CPU per exec is read from the round without them)
 */
async function streamPhase(start: Start, made: Made[], probe: boolean) {
  gc?.();
  const rssAtStart = mib();
  const eld = monitorEventLoopDelay({ resolution: 1 });
  eld.enable();
  let peakRss = rssAtStart;
  const rssTimer = setInterval(() => (peakRss = Math.max(peakRss, mib())), 250);
  let bytes = 0;
  const c0 = cpuMs();
  const t0 = performance.now();
  const req = {
    command: ["sh", "-c", `for i in $(seq ${execSeconds}); do echo "tick $i"; sleep 1; done`],
    timeoutMs: (execSeconds + 120) * 1000,
  };
  const execs = Array.from({ length: M }, (_, i) => outcome(start, made[i % made.length], req, (n) => (bytes += n)));
  // creates while the execs stream: extra sandboxes beyond N, killed right away
  const accept: number[] = [];
  await new Promise((r) => setTimeout(r, 3000));
  const until = probe ? performance.now() + (execSeconds - 5) * 1000 : 0;
  while (performance.now() < until) {
    const c = performance.now();
    try {
      const sb = await rt.manager.create({ owner: "prober", profile: "base", size: "nano" });
      void rt.manager.kill(sb.owner, sb.id).catch(() => undefined);
    } catch {
      // over budget: a fast 429, counted like the rest
    }
    accept.push(performance.now() - c);
    await new Promise((r) => setTimeout(r, 50));
  }
  const outcomes = count(await Promise.all(execs));
  const wallMs = performance.now() - t0;
  const spentMs = cpuMs() - c0;
  clearInterval(rssTimer);
  eld.disable();
  return {
    outcomes,
    streamedBytes: bytes,
    expectedBytes: ticks.length * M,
    wallMs: Math.round(wallMs),
    cpuMsPerExec: Math.round((spentMs / M) * 100) / 100,
    cpuCores: Math.round((spentMs / wallMs) * 100) / 100,
    rssAtStartMiB: rssAtStart,
    peakRssMiB: peakRss,
    acceptDuringExecs: stats(accept),
    loopDelayP99Ms: Math.round(eld.percentile(99) / 1e5) / 10,
  };
}

const probe = (p: { acceptDuringExecs: ReturnType<typeof stats> }) =>
  p.acceptDuringExecs.n ? `${p.acceptDuringExecs.p50} / ${p.acceptDuringExecs.p99}` : null;

try {
  const t0 = performance.now();
  const made = await Promise.all(
    Array.from({ length: N }, (_, i) => rt.manager.create({ owner: `o${i % 20}`, profile: "base", size: "nano" })),
  );
  out.createAllMs = Math.round(performance.now() - t0);
  const readyIn = async (list: () => Promise<{ ready?: boolean }[]>) => {
    for (let i = 0; i < 3600 && (await list()).filter((s) => s.ready).length < N; i++)
      await new Promise((r) => setTimeout(r, 500));
  };
  await readyIn(() => rt.backend.list());
  out.allReadyMs = Math.round(performance.now() - t0);
  if (ws) await readyIn(() => ws.list());
  out.rssWithSandboxesMiB = mib();
  for (const path of paths) {
    const start = starts[path];
    if (!start) throw new Error(`--paths: unknown path ${JSON.stringify(path)}: use channel and/or websocket`);
    const opened = path === "channel" ? await openAll(start, made) : undefined;
    const alone = await streamPhase(start, made, false);
    const probed = await streamPhase(start, made, true);
    out[path] = { ...(opened ? { openAll: opened } : {}), execsAlone: alone, execsWithCreates: probed };
    for (const [round, phase] of [
      ["alone", alone],
      ["+ creates", probed],
    ] as const) {
      rows.push({
        path: `${path} ${round}`,
        "open all s / peak RSS": opened ? `${Math.round(opened.ms / 100) / 10} / ${opened.peakRssMiB}` : null,
        "RSS start / peak MiB": `${phase.rssAtStartMiB} / ${phase.peakRssMiB}`,
        "CPU ms / exec": phase.cpuMsPerExec,
        "accept p50 / p99 ms": probe(phase),
        "loop p99 ms": phase.loopDelayP99Ms,
        "exit 0": phase.outcomes["exit 0"] ?? 0,
        "timed out": phase.outcomes["timed out"] ?? 0,
        "bytes %": Math.round((phase.streamedBytes / phase.expectedBytes) * 1000) / 10,
      });
    }
  }
} finally {
  await wsManager?.close();
  await rt.close();
}
console.log(JSON.stringify(out, null, 2));
console.log(table(rows));
process.exit(0);
