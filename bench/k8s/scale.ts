// One manager holding N live sandboxes on the Kubernetes backend while M streaming execs run
// at once (each prints a line per second for a while), with creates measured during the
// execs: RSS of the manager process, create-accept p99 under that load, exec outcomes.
//   npx tsx bench/k8s/scale.ts [--sandboxes 1000] [--execs 1000] [--exec-seconds 20]
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { arg, benchRuntime, stats, table } from "./env.ts";

const N = Number(arg("sandboxes", "1000"));
const M = Number(arg("execs", "1000"));
const execSeconds = Number(arg("exec-seconds", "20"));
const mib = () => Math.round(process.memoryUsage().rss / 2 ** 20);
const nodes = Math.ceil((N * 100) / 3600) + 2; // 4-CPU kwok nodes for N x 100m, with slack
const rt = await benchRuntime(
  "bench-scale",
  {
    budget: { cpu: String(Math.ceil(N / 10) + 2), memory: `${N}Gi` },
    defaults: { size: "nano", idleTimeoutSeconds: 0, ttlSeconds: 7200 },
  },
  nodes,
);
const out: Record<string, unknown> = { bench: "k8s-scale", sandboxes: N, execs: M, execSeconds, rssStartMiB: mib() };
try {
  const t0 = performance.now();
  const made = await Promise.all(
    Array.from({ length: N }, (_, i) => rt.manager.create({ owner: `o${i % 20}`, profile: "base", size: "nano" })),
  );
  out.createAllMs = Math.round(performance.now() - t0);
  for (let i = 0; i < 3600 && (await rt.backend.list()).filter((s) => s.ready).length < N; i++)
    await new Promise((r) => setTimeout(r, 500));
  out.allReadyMs = Math.round(performance.now() - t0);
  out.rssWithSandboxesMiB = mib();

  const eld = monitorEventLoopDelay({ resolution: 1 });
  eld.enable();
  let peakRss = mib();
  const rssTimer = setInterval(() => (peakRss = Math.max(peakRss, mib())), 250);
  const execOutcomes: Record<string, number> = {};
  let bytes = 0;
  const execs = Array.from({ length: M }, async (_, i) => {
    const sb = made[i % made.length];
    try {
      const s = await rt.manager.exec(sb.owner, sb.id, {
        command: ["sh", "-c", `for i in $(seq ${execSeconds}); do echo "tick $i"; sleep 1; done`],
        timeoutMs: (execSeconds + 120) * 1000,
      });
      s.stdout.on("data", (c: Buffer) => (bytes += c.length));
      s.stderr.resume();
      const r = await s.result;
      const k = `exit ${r.exitCode}`;
      execOutcomes[k] = (execOutcomes[k] ?? 0) + 1;
    } catch (err) {
      const k = (err as { code?: string }).code ?? "error";
      execOutcomes[k] = (execOutcomes[k] ?? 0) + 1;
    }
  });
  // creates while the execs stream: extra sandboxes beyond N, killed right away
  const accept: number[] = [];
  await new Promise((r) => setTimeout(r, 3000));
  const until = performance.now() + (execSeconds - 5) * 1000;
  let extra = 0;
  while (performance.now() < until) {
    const c0 = performance.now();
    try {
      const sb = await rt.manager.create({ owner: "prober", profile: "base", size: "nano" });
      accept.push(performance.now() - c0);
      extra++;
      void rt.manager.kill(sb.owner, sb.id).catch(() => undefined);
    } catch {
      accept.push(performance.now() - c0);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  await Promise.all(execs);
  clearInterval(rssTimer);
  eld.disable();
  Object.assign(out, {
    execOutcomes,
    streamedBytes: bytes,
    acceptDuringExecs: stats(accept),
    probeCreates: extra,
    peakRssMiB: peakRss,
    loopDelayP99Ms: Math.round(eld.percentile(99) / 1e5) / 10,
  });
} finally {
  await rt.close();
}
console.log(JSON.stringify(out, null, 2));
console.log(
  table([
    {
      sandboxes: N,
      execs: M,
      "all ready s": Math.round(Number(out.allReadyMs) / 100) / 10,
      "RSS MiB (peak)": out.peakRssMiB as number,
      "accept p50 ms": (out.acceptDuringExecs as { p50: number }).p50,
      "accept p99 ms": (out.acceptDuringExecs as { p99: number }).p99,
      execs_ok: (out.execOutcomes as Record<string, number>)["exit 0"] ?? 0,
    },
  ]),
);
process.exit(0);
