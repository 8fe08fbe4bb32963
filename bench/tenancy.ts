// What teams cost at admission (issue 34, docs/benchmarks.md "Teams"), in one run:
//  1. over replicas: --clients clients in a closed loop (create -> kill) spread round-robin over
//     --replicas manager processes sharing one budget through the shares Lease, once without
//     tenancy and once with three teams (a hard limit and a rate bucket, a guarantee, the
//     default team), the owners spread over the teams. Server side: the replicas' own
//     sbx_create_accept_seconds (the bucket holding p50/p99, first bucket 1 ms, and the exact
//     mean from _sum/_count); client side: the HTTP round trip from this process.
//  2. in process: Admission.admit + release, the whole in-memory decision the accept path runs,
//     without and with the same teams, with --standing reservations held, interleaved in
//     rounds so both see the same machine load. This is where "added at p50" is resolvable.
// Prints JSON and tables. Asserts nothing.
//   npx tsx bench/tenancy.ts [--replicas 3] [--clients 50] [--seconds 20] [--budget 400]
//     [--samples 200000] [--standing 300] [--parts replicas,admission]
import { performance } from "node:perf_hooks";
import { type RuntimeConfigInput, validateRuntimeConfig } from "../runtime/config/schema.ts";
import { Admission, admissionOptionsFor } from "../runtime/core/admission.ts";
import { addSandboxNodes, adminClients, installSandboxCrd } from "../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../tools/control-plane/standalone.ts";
import { arg, stats, table } from "./k8s/env.ts";
import { type CreateOutcome, createVia, killVia, type Replica, serverQuantile } from "./k8s/replicaFleet.ts";
import { type BenchOptions, type Ctx, type Row, sleep, withFleet } from "./k8s/replicaSetup.ts";
import { nearestRank } from "./lib/percentile.ts";

const replicas = Number(arg("replicas", "3"));
const clients = Number(arg("clients", "50"));
const seconds = Number(arg("seconds", "20"));
const budget = Number(arg("budget", "400"));
const samples = Number(arg("samples", "200000"));
const standing = Number(arg("standing", "300"));
const parts = arg("parts", "replicas,admission").split(",");

const OWNERS = ["team-a-agent", "team-b-agent", undefined]; // team a, team b, the default team ("fleet")

/** Three teams: a with a hard limit and a rate it never meets here, b guaranteed a fifth, the default team. */
function tenancy(nanos: number): RuntimeConfigInput["tenancy"] {
  return {
    teams: [
      {
        name: "a",
        members: ["team-a-agent", "owner-0"],
        limits: { sandboxes: nanos, createsPerMinute: 1_000_000 },
      },
      {
        name: "b",
        members: ["team-b-agent", "owner-1"],
        guarantee: { cpu: `${(nanos / 5) * 0.1}`, memory: `${(nanos / 5) * 128}Mi` },
      },
    ],
  };
}

/** Mean server-side accept (ms) from the replicas' histogram _sum and _count (cold, ok). */
async function serverMean(rs: Replica[]): Promise<number | null> {
  let sum = 0;
  let count = 0;
  for (const r of rs) {
    const text = await (await fetch(`${r.url}/metrics`)).text();
    for (const line of text.split("\n")) {
      if (!line.startsWith("sbx_create_accept_seconds_") || !line.includes('path="cold"')) continue;
      if (!line.includes('outcome="ok"')) continue;
      const v = Number(line.slice(line.lastIndexOf(" ") + 1));
      if (line.startsWith("sbx_create_accept_seconds_sum")) sum += v;
      if (line.startsWith("sbx_create_accept_seconds_count")) count += v;
    }
  }
  return count === 0 ? null : Math.round((sum / count) * 1e6) / 1e3;
}

async function loopOver(c: Ctx, name: string, config: Partial<RuntimeConfigInput>): Promise<Row> {
  return withFleet(c, `bten-${name.replaceAll(" ", "-")}`, { config }, async (f) => {
    const out: CreateOutcome[] = [];
    const deadline = performance.now() + seconds * 1000;
    const rs = f.alive();
    await Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        const r = rs[i % rs.length];
        const owner = OWNERS[i % OWNERS.length];
        while (performance.now() < deadline) {
          const o = await createVia(r, { size: "nano" }, owner);
          out.push(o);
          if (o.id) await killVia(r, o.id);
          else await sleep(Number(o.retryAfter ?? 1) * 1000);
        }
      }),
    );
    const ok = out.filter((o) => o.status === 201);
    const s = stats(ok.map((o) => o.ms));
    return {
      run: name,
      requests: out.length,
      admitted: ok.length,
      refused: out.length - ok.length,
      serverP50ms: await serverQuantile(f.managers, "cold", 0.5),
      serverP99ms: await serverQuantile(f.managers, "cold", 0.99),
      serverMeanMs: await serverMean(f.managers),
      clientP50ms: s.p50,
      clientP99ms: s.p99,
    };
  });
}

async function overReplicas(): Promise<Row[]> {
  const cp = await kubeconfig();
  const admin = adminClients(cp.path);
  await installSandboxCrd(admin.kc);
  const removeNodes = await addSandboxNodes(admin.core, "bench-ten", Math.ceil(budget / 40) + 2);
  const o = { replicas, budget, clients, loopSeconds: seconds, leaseSeconds: 15 } as BenchOptions;
  const c: Ctx = { o, admin, kubeconfigPath: cp.path };
  try {
    const rows = [await loopOver(c, "without teams", {})];
    console.error(JSON.stringify(rows.at(-1)));
    rows.push(await loopOver(c, "with teams", { tenancy: tenancy(budget / 2) }));
    console.error(JSON.stringify(rows.at(-1)));
    return rows;
  } finally {
    await removeNodes();
    await cp.stop();
  }
}

/** ns per admit + release with `standing` reservations held, spread over the owners of both teams and none. */
function admissionCost(): Row[] {
  const Mi = 2 ** 20;
  const nano = { name: "nano", cpuRequestMillis: 100, memoryRequestBytes: 128 * Mi };
  const base = { budget: { cpu: `${budget / 10}`, memory: `${budget * 128}Mi` } };
  const make = (t?: RuntimeConfigInput["tenancy"]) => {
    const cfg = validateRuntimeConfig(t ? { ...base, tenancy: t } : base);
    const adm = new Admission(cfg.budget, admissionOptionsFor(cfg, { nowMs: () => Math.floor(performance.now()) }));
    for (let i = 0; i < standing; i++) adm.admit({ id: `s${i}`, owner: `owner-${i % 3}`, size: nano });
    return adm;
  };
  const runs = { "without teams": make(), "with teams": make(tenancy(budget / 2)) };
  const ns: Record<string, number[]> = { "without teams": [], "with teams": [] };
  const rounds = 20;
  for (let round = 0; round < rounds; round++) {
    for (const [name, adm] of Object.entries(runs)) {
      const xs = ns[name];
      for (let i = 0; i < samples / rounds; i++) {
        const owner = `owner-${i % 3}`;
        const t0 = process.hrtime.bigint();
        adm.admit({ id: "probe", owner, size: nano });
        adm.release("probe");
        xs.push(Number(process.hrtime.bigint() - t0));
      }
    }
  }
  return Object.entries(ns).map(([name, xs]) => ({
    run: name,
    samples: xs.length,
    p50us: Math.round((nearestRank(xs, 50) ?? 0) / 10) / 100,
    p99us: Math.round((nearestRank(xs, 99) ?? 0) / 10) / 100,
  }));
}

const result: Record<string, unknown> = {
  options: { replicas, clients, seconds, budget, samples, standing },
  at: new Date().toISOString(),
};
if (parts.includes("admission")) {
  result.admission = admissionCost();
  console.error(JSON.stringify(result.admission));
}
if (parts.includes("replicas")) result.replicas = await overReplicas();
console.log(JSON.stringify(result, null, 2));
for (const k of ["admission", "replicas"]) if (result[k]) console.log(`\n${k}\n${table(result[k] as Row[])}`);
