// The scenarios of bench/k8s/replicas.ts, each on a fresh namespace pair (quota = budget) and a
// fresh fleet of manager processes (replicaSetup.ts): burst past the budget, the burst with one
// replica SIGKILLed in the middle, a closed loop of clients (create -> kill), concurrent warm
// claims, and the streaming case (replicasStream.ts: ~500 streaming execs with creates meanwhile).
import { performance } from "node:perf_hooks";
import { LABELS } from "../../runtime/k8s/contract.ts";
import { addSandboxNodes, adminClients, installSandboxCrd } from "../../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../../tools/control-plane/standalone.ts";
import { stats, table } from "./env.ts";
import {
  type CreateOutcome,
  createVia,
  type Fleet,
  killVia,
  liveRecords,
  readShares,
  serverQuantile,
} from "./replicaFleet.ts";
import { type BenchOptions, type Ctx, type Row, sleep, withFleet } from "./replicaSetup.ts";
import { streamPath } from "./replicasStream.ts";

export type { BenchOptions } from "./replicaSetup.ts";

function round(f: Fleet, n: number, offset = 0): Promise<CreateOutcome[]> {
  const rs = f.alive();
  return Promise.all(Array.from({ length: n }, (_, i) => createVia(rs[(i + offset) % rs.length])));
}

function summarize(name: string, outcomes: CreateOutcome[], extra: Row): Row {
  const ok = outcomes.filter((x) => x.status === 201);
  const s = stats(ok.map((x) => x.ms));
  return {
    scenario: name,
    requests: outcomes.length,
    admitted: ok.length,
    rejected429: outcomes.filter((x) => x.status === 429).length,
    other: outcomes.filter((x) => x.status !== 201 && x.status !== 429).length,
    fenced429: outcomes.filter((x) => x.error?.details?.reason === "replica_fenced").length,
    clientP50ms: s.p50,
    clientP99ms: s.p99,
    ...extra,
  };
}

async function burst(c: Ctx): Promise<Row> {
  return withFleet(c, "brep-burst", {}, async (f, ns) => {
    const out = await round(f, c.o.burst);
    const admitted = out.filter((x) => x.status === 201).length;
    for (let i = 0; i < 600 && (await liveRecords(c.admin, ns.sandboxes)).total < admitted; i++) await sleep(200);
    await sleep(5_000); // let the reconcilers create the pods: the quota would refuse extras now
    const rec = await liveRecords(c.admin, ns.sandboxes);
    return summarize("burst", out, {
      serverP50ms: await serverQuantile(f.managers, "cold", 0.5),
      serverP99ms: await serverQuantile(f.managers, "cold", 0.99),
      liveRecords: rec.total,
      quotaExceeded: rec.quotaExceeded,
    });
  });
}

async function kill(c: Ctx): Promise<Row> {
  return withFleet(c, "brep-kill", {}, async (f, ns) => {
    const [victim] = f.managers;
    const wave = round(f, c.o.burst);
    await sleep(100);
    await victim.kill("SIGKILL");
    const killed = performance.now();
    const out = await wave;
    let reclaimMs: number | null = null;
    for (let i = 0; i < 600; i++) {
      if (!Object.hasOwn((await readShares(c.admin, ns.runtime)).replicas, victim.identity)) {
        reclaimMs = Math.round(performance.now() - killed);
        break;
      }
      await sleep(50);
    }
    const refill: CreateOutcome[] = [];
    for (let i = 0; i < 40 && (await liveRecords(c.admin, ns.sandboxes)).total < c.o.budget - 2; i++)
      refill.push(...(await round(f, 50, i)));
    const rec = await liveRecords(c.admin, ns.sandboxes);
    return summarize("kill", out, {
      reclaimMs,
      refillAdmitted: refill.filter((x) => x.status === 201).length,
      liveRecords: rec.total,
      orphaned: rec.by.get(victim.identity) ?? 0,
    });
  });
}

async function loop(c: Ctx): Promise<Row> {
  return withFleet(c, "brep-loop", {}, async (f) => {
    const out: CreateOutcome[] = [];
    const deadline = performance.now() + c.o.loopSeconds * 1000;
    const rs = f.alive();
    await Promise.all(
      Array.from({ length: c.o.clients }, async (_, i) => {
        const r = rs[i % rs.length];
        while (performance.now() < deadline) {
          const o = await createVia(r);
          out.push(o);
          if (o.id) await killVia(r, o.id);
          else await sleep(Number(o.retryAfter ?? 1) * 1000);
        }
      }),
    );
    return summarize("loop", out, {
      perSecond: Math.round(out.length / c.o.loopSeconds),
      serverP50ms: await serverQuantile(f.managers, "cold", 0.5),
      serverP99ms: await serverQuantile(f.managers, "cold", 0.99),
    });
  });
}

async function warm(c: Ctx): Promise<Row> {
  const pool = c.o.claimers + 10;
  const extra = { warmPool: [{ profile: "base", size: "nano", count: pool }] };
  return withFleet(c, "brep-warm", { config: extra, controller: true }, async (f, ns) => {
    // a fresh replica claims warm only once its pool partition settled: one phase, half the lease
    const settledAt = performance.now() + (c.o.leaseSeconds / 2) * 1000 + 2_000;
    const ready = async () =>
      (
        await c.admin.core.listNamespacedPod({ namespace: ns.sandboxes, labelSelector: `${LABELS.pool}=warm` })
      ).items.filter((p) => p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True")).length;
    for (let i = 0; i < 1200 && (await ready()) < pool; i++) await sleep(200);
    await sleep(Math.max(0, settledAt - performance.now()));
    const out = await round(f, c.o.claimers);
    const warmOut = out.filter((o) => o.warm === true).length;
    const claimed = async () =>
      (await c.admin.core.listNamespacedPod({ namespace: ns.sandboxes, labelSelector: `${LABELS.pool}=claimed` }))
        .items;
    // the claims' pod patches are written behind the answers: wait (bounded) until they landed
    const written = performance.now();
    let pods = await claimed();
    for (let i = 0; i < 150 && pods.length < warmOut; i++) {
      await sleep(200);
      pods = await claimed();
    }
    const writeBehindMs = Math.round(performance.now() - written);
    const bySandbox = new Map<string, number>();
    for (const p of pods) {
      const id = p.metadata?.labels?.[LABELS.sandbox] ?? "";
      bySandbox.set(id, (bySandbox.get(id) ?? 0) + 1);
    }
    return summarize("warm", out, {
      serverP50ms: await serverQuantile(f.managers, "warm", 0.5),
      serverP99ms: await serverQuantile(f.managers, "warm", 0.99),
      warm: warmOut,
      claimedPods: pods.length,
      claimsWrittenAfterMs: writeBehindMs,
      doubleClaims: [...bySandbox.values()].filter((n) => n > 1).length,
    });
  });
}

/** the streaming case, once per path asked for, each on its own fleet */
async function stream(c: Ctx): Promise<Row[]> {
  const rows: Row[] = [];
  for (const path of c.o.streamPaths) {
    rows.push(await streamPath(c, path));
    console.error(JSON.stringify(rows.at(-1)));
  }
  return rows;
}

const SCENARIOS: Record<string, (c: Ctx) => Promise<Row | Row[]>> = { burst, kill, loop, warm, stream };

/** one table per set of columns: the streaming rows have their own */
function tables(rows: Row[]): string {
  const groups = new Map<string, Row[]>();
  for (const r of rows) {
    const key = Object.keys(r).join(",");
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  return [...groups.values()].map(table).join("\n\n");
}

export async function benchScenarios(o: BenchOptions): Promise<void> {
  const cp = await kubeconfig();
  const admin = adminClients(cp.path);
  await installSandboxCrd(admin.kc);
  const removeNodes = await addSandboxNodes(admin.core, "bench-rep", Math.ceil(o.budget / 40) + 2);
  const rows: Row[] = [];
  try {
    for (const name of o.scenarios) {
      const run = SCENARIOS[name];
      if (!run) throw new Error(`--scenarios: unknown scenario ${name}; use ${Object.keys(SCENARIOS).join(",")}`);
      const got = await run({ o, admin, kubeconfigPath: cp.path });
      rows.push(...(Array.isArray(got) ? got : [got]));
      if (!Array.isArray(got)) console.error(JSON.stringify(got));
    }
  } finally {
    await removeNodes();
    await cp.stop();
  }
  console.log(JSON.stringify({ options: o, results: rows }, null, 2));
  console.log(tables(rows));
}
