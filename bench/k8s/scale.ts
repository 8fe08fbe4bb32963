// One manager holding N live sandboxes on the Kubernetes backend while M streaming execs run
// at once (each prints a line per second for a while), with creates measured during the
// execs: the manager's RSS, CPU per exec, create-accept p99 under that load, exec outcomes.
// Each path is its own manager process (bench/k8s/scaleReplica.ts): the real service in the
// manager role, run as the Deployment runs it (an esbuild bundle under plain node, with the
// Deployment's process environment), driven over its HTTP API as an agent's client would, its
// memory and CPU read from /proc, so nothing of this driver (tsx, the control plane's log pipes,
// the clients' side of the execs) is counted. In one run, on the same sandboxes: "channel", the
// default command channel (runtime/k8s/channel/; its first use opens it, measured apart), and
// "websocket", a second manager with channels off (one websocket exec per command: the old path,
// today's fallback). Both hold the same informers and made half the creates each, so "with
// sandboxes" compares like for like.
//   npx tsx bench/k8s/scale.ts [--sandboxes 1000] [--execs 1000] [--exec-seconds 20]
//     [--paths channel,websocket] [--runtime bundle|tsx] [--process-env deployed|none] [--memory 1Gi]
//     [--alloc-profile DIR] [--heap-snapshots DIR] [--node-options "--max-old-space-size=512"]
// (--process-env none: without the Deployment's memory settings (RUNTIME_PROCESS_ENV): glibc's
// and V8's defaults; the driver's own environment still reaches the managers)
import { loadavg } from "node:os";
import { resolve as resolvePath } from "node:path";
import { performance } from "node:perf_hooks";
import { RUNTIME_PROCESS_ENV, runtimeHeapEnv } from "../../components/runtime/render.ts";
import { ACTIVITY_FLUSH_MS } from "../../runtime/k8s/assemble.ts";
import {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
} from "../../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../../tools/control-plane/standalone.ts";
import { arg, stats, table } from "./env.ts";
import { createVia, killVia } from "./replicaFleet.ts";
import { cpuSeconds, scrape, streamExecVia, waitVia } from "./replicaStreams.ts";
import { type ReplicaProcess, type ReplicaRuntime, replicaLauncher } from "./scaleReplica.ts";

const N = Number(arg("sandboxes", "1000"));
const M = Number(arg("execs", "1000"));
const execSeconds = Number(arg("exec-seconds", "20"));
const paths = arg("paths", "channel,websocket").split(",");
const runtime = arg("runtime", "bundle") as ReplicaRuntime;
const processEnv = arg("process-env", "deployed");
for (const p of paths)
  if (p !== "channel" && p !== "websocket")
    throw new Error(`--paths: unknown path ${JSON.stringify(p)}: use channel and/or websocket`);
if (runtime !== "bundle" && runtime !== "tsx")
  throw new Error(`--runtime ${JSON.stringify(runtime)}: use bundle (as deployed) or tsx`);
if (processEnv !== "deployed" && processEnv !== "none")
  throw new Error(`--process-env ${JSON.stringify(processEnv)}: use deployed (the Deployment's env) or none`);
// --memory: the manager container's memory limit the run stands for (stacks/Pulumi.prod.yaml: 1Gi);
// the Deployment derives V8's old-space cap from it (runtimeHeapEnv); "none": V8's own sizing
const memory = arg("memory", "1Gi");
const env: Record<string, string> =
  processEnv === "deployed" ? { ...RUNTIME_PROCESS_ENV, ...(memory === "none" ? {} : runtimeHeapEnv(memory)) } : {};
// --node-options "...": NODE_OPTIONS for the managers (after the deployed env's), to try V8 settings
const nodeOptions = arg("node-options", "");
if (nodeOptions) env.NODE_OPTIONS = [env.NODE_OPTIONS, nodeOptions].filter(Boolean).join(" ");
// --alloc-profile DIR: each streaming round's allocations (garbage included) as a heap profile per
// manager (bench/k8s/allocProfile.ts); the sampling itself costs the manager some CPU
const allocDir = arg("alloc-profile", "");
if (allocDir) env.SBX_BENCH_ALLOC_PROFILE_DIR = resolvePath(allocDir);
// --heap-snapshots DIR: a heap snapshot of each manager halfway through each streaming round, moved into DIR
const snapshotDir = arg("heap-snapshots", "");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load1 = () => Math.round(loadavg()[0] * 10) / 10;

function count(xs: string[]): Record<string, number> {
  const m: Record<string, number> = {};
  for (const k of xs) m[k] = (m[k] ?? 0) + 1;
  return m;
}

const ticks = Array.from({ length: execSeconds }, (_, i) => `tick ${i + 1}\n`).join("");
const ELD_P99 = /^sbx_process_nodejs_eventloop_lag_p99_seconds (\S+)$/m;
/** a gauge of the replica's /metrics in MiB (V8's heap: garbage included, nothing forces a collection) */
const gaugeMiB = (text: string, name: string) => {
  const v = new RegExp(`^sbx_process_nodejs_${name} (\\S+)$`, "m").exec(text)?.[1];
  return v === undefined ? null : Math.round(Number(v) / 2 ** 20);
};

/**
 * What `fn` costs the replica: its CPU seconds (from /proc), its peak VmRSS (sampled every
 * 250 ms; the kernel's VmHWM covers the whole life of the process, so it is reported apart),
 * its event-loop delay p99 over the window (scraping /metrics resets it) and the load.
 */
async function measured<T>(r: ReplicaProcess, fn: () => Promise<T>) {
  await scrape(r);
  if (allocDir) process.kill(r.pid, "SIGWINCH");
  const rssAtStart = r.memory()?.rssMiB ?? 0;
  let peak = rssAtStart;
  let maxLoad = load1();
  const timer = setInterval(() => {
    peak = Math.max(peak, r.memory()?.rssMiB ?? 0);
    maxLoad = Math.max(maxLoad, load1());
  }, 250);
  const c0 = cpuSeconds(r.pid) ?? 0;
  const t0 = performance.now();
  try {
    const value = await fn();
    const metrics = await scrape(r);
    const eld = ELD_P99.exec(metrics)?.[1];
    return {
      value,
      wallMs: Math.round(performance.now() - t0),
      cpuMs: Math.round(((cpuSeconds(r.pid) ?? 0) - c0) * 1000),
      rssAtStartMiB: rssAtStart,
      peakRssMiB: Math.max(peak, r.memory()?.rssMiB ?? 0),
      loopDelayP99Ms: eld === undefined ? null : Math.round(Number(eld) * 1000),
      heapAtEndMiB: {
        used: gaugeMiB(metrics, "heap_size_used_bytes"),
        total: gaugeMiB(metrics, "heap_size_total_bytes"),
      },
      loadMax: maxLoad,
    };
  } finally {
    clearInterval(timer);
    if (allocDir) process.kill(r.pid, "SIGWINCH");
  }
}

/** one exec over HTTP to its end: "exit N", "timed out", or the error's code */
async function execOnce(r: ReplicaProcess, id: string, command: string[], timeoutMs: number) {
  const { tally } = await streamExecVia(r, id, { command, timeoutMs });
  const outcome = tally.error
    ? tally.error.code
    : !tally.exit
      ? "cut off"
      : tally.exit.timedOut
        ? "timed out"
        : `exit ${tally.exit.exitCode}`;
  return { outcome, bytes: tally.stdoutBytes };
}

/** the first command in every sandbox at once: on the channel path, what opens the N channels */
async function openAll(r: ReplicaProcess, ids: string[]) {
  const m = await measured(r, () => Promise.all(ids.map((id) => execOnce(r, id, ["true"], 300_000))));
  const { value, ...rest } = m;
  return { ...rest, outcomes: count(value.map((v) => v.outcome)) };
}

/** M streaming execs at once; with `probe`, a create every 50 ms while they stream (killed right away) */
async function streamPhase(r: ReplicaProcess, ids: string[], probe: boolean) {
  const command = ["sh", "-c", `for i in $(seq ${execSeconds}); do echo "tick $i"; sleep 1; done`];
  const accept: number[] = [];
  const m = await measured(r, async () => {
    const execs = Array.from({ length: M }, (_, i) =>
      execOnce(r, ids[i % ids.length], command, (execSeconds + 120) * 1000),
    );
    await sleep(3000);
    // a V8 heap snapshot of the manager halfway through the round (--heapsnapshot-signal)
    if (snapshotDir) setTimeout(() => process.kill(r.pid, "SIGUSR2"), (execSeconds * 1000) / 2).unref();
    const until = probe ? performance.now() + (execSeconds - 5) * 1000 : 0;
    while (performance.now() < until) {
      const o = await createVia(r); // a 429 (over budget) is a fast answer, counted like the rest
      accept.push(o.ms);
      if (o.id) void killVia(r, o.id).catch(() => undefined);
      await sleep(50);
    }
    return Promise.all(execs);
  });
  const { value, ...rest } = m;
  const streamedBytes = value.reduce((n, v) => n + v.bytes, 0);
  return {
    outcomes: count(value.map((v) => v.outcome)),
    streamedBytes,
    expectedBytes: ticks.length * M,
    ...rest,
    cpuMsPerExec: Math.round((rest.cpuMs / M) * 100) / 100,
    acceptDuringExecs: stats(accept),
  };
}

/** every sandbox ready as `r` sees it (a wait that ends early, e.g. a client timeout, is asked again) */
async function readyThrough(r: ReplicaProcess, ids: string[]) {
  await Promise.all(
    ids.map(async (id) => {
      for (let i = 0; i < 20 && (await waitVia(r, id, 240)) !== 200; i++) await sleep(1000);
    }),
  );
}

const cp = await kubeconfig();
const admin = adminClients(cp.path);
await installSandboxCrd(admin.kc);
const removeNodes = await addSandboxNodes(admin.core, "bench-scale", Math.ceil((N * 100) / 3600) + 2);
const ns = await freshNamespaces(admin.core, "bench-scale");
const launcher = replicaLauncher(runtime);
const replicas: ReplicaProcess[] = [];
const out: Record<string, unknown> = { bench: "k8s-scale", sandboxes: N, execs: M, execSeconds, runtime, env };
const rows: Record<string, string | number | null>[] = [];
try {
  const base = {
    kubeconfigPath: cp.path,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    config: {
      budget: { cpu: String(Math.ceil(N / 10) + 2), memory: `${N}Gi` },
      defaults: { size: "nano" as const, idleTimeoutSeconds: 0, ttlSeconds: 7200 },
    },
    role: "manager" as const,
    // the product's flush (the fleet's default is 500 ms): each flush patches every busy sandbox's record
    activityFlushMs: ACTIVITY_FLUSH_MS,
  };
  const byPath: Record<string, ReplicaProcess> = {};
  for (const path of paths) {
    const r = await launcher.start(
      { ...base, identity: `bench-${path}`, ...(path === "websocket" ? { commandChannel: { enabled: false } } : {}) },
      env,
    );
    replicas.push(r);
    byPath[path] = r;
  }
  out.rssStartMiB = Object.fromEntries(paths.map((p) => [p, byPath[p].memory()?.rssMiB]));
  const t0 = performance.now();
  // round-robin, so each manager carries the same share of the creates' leftovers into its rounds
  const made = await Promise.all(Array.from({ length: N }, (_, i) => createVia(replicas[i % replicas.length])));
  out.createAllMs = Math.round(performance.now() - t0);
  const ids = made.flatMap((o) => (o.id ? [o.id] : []));
  out.created = count(made.map((o) => String(o.status)));
  for (const r of replicas) await readyThrough(r, ids);
  out.allReadyMs = Math.round(performance.now() - t0);
  await sleep(5000); // the informers' last updates and the write-behind settle before the baseline
  const withSandboxes = Object.fromEntries(paths.map((p) => [p, byPath[p].memory()]));
  out.withSandboxes = withSandboxes;
  for (const path of paths) {
    const r = byPath[path];
    const opened = path === "channel" ? await openAll(r, ids) : undefined;
    if (snapshotDir) {
      process.kill(r.pid, "SIGUSR2"); // at rest: the sandboxes (and channels) held, no exec running
      await sleep(20_000);
    }
    const alone = await streamPhase(r, ids, false);
    const probed = await streamPhase(r, ids, true);
    out[path] = {
      ...(opened ? { openAll: opened } : {}),
      execsAlone: alone,
      execsWithCreates: probed,
      hwm: r.memory(),
    };
    for (const [round, phase] of [
      ["alone", alone],
      ["+ creates", probed],
    ] as const) {
      const a = phase.acceptDuringExecs;
      rows.push({
        path: `${path} ${round}`,
        "RSS with N MiB": withSandboxes[path]?.rssMiB ?? null,
        "open all s / peak RSS": opened ? `${Math.round(opened.wallMs / 100) / 10} / ${opened.peakRssMiB}` : null,
        "RSS start / peak MiB": `${phase.rssAtStartMiB} / ${phase.peakRssMiB}`,
        "CPU ms / exec": phase.cpuMsPerExec,
        "accept p50 / p99 ms": a.n ? `${a.p50} / ${a.p99}` : null,
        "loop p99 ms": phase.loopDelayP99Ms,
        "exit 0": phase.outcomes["exit 0"] ?? 0,
        "timed out": phase.outcomes["timed out"] ?? 0,
        "bytes %": Math.round((phase.streamedBytes / phase.expectedBytes) * 1000) / 10,
        "load max": phase.loadMax,
      });
    }
  }
} finally {
  await Promise.all(replicas.map((r) => r.kill("SIGTERM")));
  if (snapshotDir) launcher.keepSnapshots(snapshotDir);
  launcher.dispose();
  await ns.cleanup();
  await removeNodes();
  await cp.stop();
}
console.log(JSON.stringify(out, null, 2));
console.log(table(rows));
process.exit(0);
