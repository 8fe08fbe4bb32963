// The scenarios of bench/k8s/replicas.ts, each on a fresh namespace pair (quota = budget) and a
// fresh fleet of manager processes: burst past the budget, the burst with one replica SIGKILLed
// in the middle, a closed loop of clients (create -> kill), and concurrent warm claims.
import { performance } from "node:perf_hooks";
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import type { KubeClients } from "../../runtime/k8s/client.ts";
import { LABELS } from "../../runtime/k8s/contract.ts";
import {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
} from "../../tools/control-plane/fixtures.ts";
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
  startFleet,
} from "./replicaFleet.ts";

export interface BenchOptions {
  replicas: number;
  budget: number;
  burst: number;
  clients: number;
  loopSeconds: number;
  claimers: number;
  scenarios: string[];
  leaseSeconds: number;
}

type Row = Record<string, string | number | null>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Ctx {
  o: BenchOptions;
  admin: KubeClients;
  kubeconfigPath: string;
}

async function withFleet<T>(
  c: Ctx,
  prefix: string,
  extra: Partial<RuntimeConfigInput>,
  controller: boolean,
  fn: (f: Fleet, ns: { sandboxes: string; runtime: string }) => Promise<T>,
): Promise<T> {
  const ns = await freshNamespaces(c.admin.core, prefix);
  const cpu = `${(c.o.budget * 100) / 1000}`;
  const memory = `${c.o.budget * 128}Mi`;
  await c.admin.core.createNamespacedResourceQuota({
    namespace: ns.sandboxes,
    body: {
      metadata: { name: "sandboxes" },
      spec: {
        hard: {
          pods: String(c.o.budget + (extra.warmPool?.[0]?.count ?? 0)),
          "requests.cpu": cpu,
          "requests.memory": memory,
        },
      },
    },
  });
  const config: Partial<RuntimeConfigInput> = {
    budget: { cpu, memory },
    defaults: { size: "nano", idleTimeoutSeconds: 0 },
    kubernetes: { budgetShares: { enabled: true, leaseSeconds: c.o.leaseSeconds, tickMs: 200 } },
    ...extra,
  };
  const fleet = await startFleet({
    kubeconfigPath: c.kubeconfigPath,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    config,
    managers: c.o.replicas,
    controller,
    prefix,
  });
  try {
    for (let i = 0; i < 300; i++) {
      const doc = await readShares(c.admin, ns.runtime).catch(() => undefined);
      const e = doc ? Object.values(doc.replicas) : [];
      if (e.length === c.o.replicas && e.every((x) => !x.want)) break;
      await sleep(100);
    }
    return await fn(fleet, ns);
  } finally {
    await fleet.close();
    await ns.cleanup();
  }
}

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
  return withFleet(c, "brep-burst", {}, false, async (f, ns) => {
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
  return withFleet(c, "brep-kill", {}, false, async (f, ns) => {
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
  return withFleet(c, "brep-loop", {}, false, async (f) => {
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
  return withFleet(c, "brep-warm", extra, true, async (f, ns) => {
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

const SCENARIOS: Record<string, (c: Ctx) => Promise<Row>> = { burst, kill, loop, warm };

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
      rows.push(await run({ o, admin, kubeconfigPath: cp.path }));
      console.error(JSON.stringify(rows.at(-1)));
    }
  } finally {
    await removeNodes();
    await cp.stop();
  }
  console.log(JSON.stringify({ options: o, results: rows }, null, 2));
  console.log(table(rows));
}
