// One admission budget across three manager replicas, each its own process (bench/k8s/replicaFleet.ts),
// sharing it through the shares Lease (runtime/k8s/budget). A burst past the budget spread
// round-robin: at every sample what the replicas hold plus what nobody holds stays within the
// budget, nearly all of it is admitted, the ResourceQuota never says no, and every reject is a
// 429 with a reason and Retry-After. Then one replica is SIGKILLed in the middle of a burst:
// within the lease plus 5 s its share is free, its sandboxes count from the live records, and
// the survivors admit into what it freed.
//
// Smaller than the 1,500 vs 1,000 (here 240 vs 150, the same shape): three tsx
// processes, a control plane and 1,000 pods do not fit this suite's time on two shared cores.
// bench/k8s/replicas.ts runs the full size.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CreateOutcome,
  createVia,
  type Fleet,
  liveRecords,
  metricOf,
  readShares,
  startFleet,
} from "../../../bench/k8s/replicaFleet.ts";
import type { SharesDoc } from "../../../runtime/k8s/budget/sharePlan.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "../runtime/support.ts";

const BUDGET = 150; // nano sandboxes (100m, 128Mi each)
const ATTEMPTS = 240;
// the production lease: with 8 s (a 4 s half-lease) a replica whose event loop stalled for 4 s under two
// suites on the 2 shared cores was retired mid-burst and its share stranded (143 of 150 admitted, seen
// in a clean-clone run); the fence is meant for a replica that is gone, not one that is slow
const LEASE_SECONDS = 15;
const NANO_CPU = 100;

let kubeconfigPath: string;
let clients: KubeClients;
let removeNodes: () => Promise<void>;

const config = {
  budget: { cpu: `${(BUDGET * NANO_CPU) / 1000}`, memory: `${BUDGET * 128}Mi` },
  defaults: { size: "nano", idleTimeoutSeconds: 0 },
  kubernetes: { budgetShares: { enabled: true, leaseSeconds: LEASE_SECONDS, tickMs: 100 } },
};

beforeAll(async () => {
  kubeconfigPath = await testKubeconfigPath();
  clients = adminClients(kubeconfigPath);
  await installSandboxCrd(clients.kc);
  removeNodes = await addSandboxNodes(clients.core, "replicas", 5); // 5 x 4 CPU: room for 200 x 100m
}, 600_000);

afterAll(async () => {
  await removeNodes?.();
}, 600_000);

async function fleetIn(prefix: string): Promise<{ ns: TestNamespaces; fleet: Fleet }> {
  const ns = await freshNamespaces(clients.core, prefix);
  // the namespace quota is the backstop, as in production: exactly the budget
  await clients.core.createNamespacedResourceQuota({
    namespace: ns.sandboxes,
    body: {
      metadata: { name: "sandboxes" },
      spec: {
        hard: { pods: String(BUDGET), "requests.cpu": config.budget.cpu, "requests.memory": config.budget.memory },
      },
    },
  });
  const fleet = await startFleet({
    kubeconfigPath,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    config,
    managers: 3,
    prefix,
  });
  return { ns, fleet };
}

/** What the replicas logged about their shares (with SBX_TEST_LOG=info), for a failure's message. */
const sharesLog = (fleet: Fleet) =>
  fleet.managers
    .flatMap((r) =>
      r
        .stderr()
        .split("\n")
        .filter((l) => l.includes("budget-shares"))
        .map((l) => `${r.identity}: ${l}`),
    )
    .join("\n");

const sumShares = (doc: SharesDoc) => Object.values(doc.replicas).reduce((s, e) => s + e.share.cpuMillis, 0);

/** Shares at rest: every replica holds its fair part and nobody asks. */
async function settled(fleet: Fleet, runtimeNs: string): Promise<void> {
  const n = fleet.alive().length;
  let last: SharesDoc | undefined;
  await waitFor("shares settle at the fair split", async () => {
    last = await readShares(clients, runtimeNs);
    const e = Object.values(last.replicas);
    return e.length === n && e.every((x) => !x.want && x.share.cpuMillis === Math.floor((BUDGET * NANO_CPU) / n));
  }).catch((err: Error) => {
    throw new Error(`${err.message}; last shares ${JSON.stringify(last)}; ${sharesLog(fleet)}`);
  });
}

/**
 * Samples every 50 ms until stopped: each live replica's reservations (its /metrics) plus the live
 * records no live replica admitted. Records a violation whenever that sum exceeds the budget.
 */
function sampler(fleet: Fleet, ns: TestNamespaces) {
  const over: string[] = [];
  let samples = 0;
  let stop = false;
  const run = (async () => {
    while (!stop) {
      const alive = fleet.alive();
      const [used, records] = await Promise.all([
        Promise.all(alive.map((r) => metricOf(r, 'sbx_budget_used{resource="cpu_millis"}').catch(() => 0))),
        liveRecords(clients, ns.sandboxes),
      ]);
      const ids = new Set(alive.map((r) => r.identity));
      const orphans = [...records.by].filter(([who]) => !ids.has(who)).reduce((s, [, n]) => s + n * NANO_CPU, 0);
      const held = used.reduce((a, b) => a + b, 0) + orphans;
      samples++;
      if (held > BUDGET * NANO_CPU) over.push(`held ${held} (used ${used.join("+")}, orphans ${orphans})`);
      if (records.total > BUDGET) over.push(`${records.total} live records`);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    over,
    samples: () => samples,
    stop: async () => {
      stop = true;
      await run;
    },
  };
}

function burst(fleet: Fleet, n: number): Promise<CreateOutcome[]> {
  const rs = fleet.alive();
  return Promise.all(Array.from({ length: n }, (_, i) => createVia(rs[i % rs.length])));
}

function expectCleanRejects(outcomes: CreateOutcome[]): void {
  for (const o of outcomes.filter((x) => x.status !== 201 && x.status !== 0)) {
    expect(o.status, JSON.stringify(o)).toBe(429);
    expect(o.error?.code).toBe("capacity");
    expect(o.error?.message).toMatch(/short on cpu .*\(this replica/);
    expect(o.error?.details?.reason).toMatch(/^replica_(share|fenced)$/);
    expect(Number(o.retryAfter)).toBeGreaterThan(0);
  }
}

describe("three manager replicas, one budget", () => {
  let ns: TestNamespaces;
  let fleet: Fleet;
  beforeAll(async () => ({ ns, fleet } = await fleetIn("rep-burst")), 600_000);
  afterAll(async () => {
    await fleet?.close();
    await ns?.cleanup();
  }, 120_000);

  it(`${ATTEMPTS} concurrent creates vs a budget of ${BUDGET}: never over, >= 99% admitted, no QuotaExceeded`, async () => {
    await settled(fleet, ns.runtime);
    const s = sampler(fleet, ns);
    const outcomes = await burst(fleet, ATTEMPTS);
    await waitFor(
      "every admitted record written",
      async () => (await liveRecords(clients, ns.sandboxes)).total >= outcomes.filter((o) => o.status === 201).length,
    );
    await new Promise((r) => setTimeout(r, 1_000)); // and a second of shares moving after it
    await s.stop();
    const admitted = outcomes.filter((o) => o.status === 201);
    const why = `${JSON.stringify(await readShares(clients, ns.runtime))}\n${sharesLog(fleet)}`;
    expect(s.over, why).toEqual([]);
    expect(s.samples()).toBeGreaterThan(5);
    expect(admitted.length, why).toBeGreaterThanOrEqual(Math.ceil(BUDGET * 0.99));
    expect(admitted.length).toBeLessThanOrEqual(BUDGET);
    expect(outcomes.filter((o) => o.status === 429)).toHaveLength(ATTEMPTS - admitted.length);
    expectCleanRejects(outcomes);
    // the quota is the backstop and never said no: every admitted sandbox got its pod
    await waitFor(
      "every admitted sandbox has a pod",
      async () =>
        (await clients.core.listNamespacedPod({ namespace: ns.sandboxes })).items.filter(
          (p) => !p.metadata?.deletionTimestamp,
        ).length === admitted.length,
      // a safety net, not the assertion: under a loaded machine 150 pods take minutes to appear
      240_000,
    );
    expect((await liveRecords(clients, ns.sandboxes)).quotaExceeded).toBe(0);
    expect(sumShares(await readShares(clients, ns.runtime))).toBeLessThanOrEqual(BUDGET * NANO_CPU);
  }, 420_000);
});

describe("a replica SIGKILLed mid-burst", () => {
  let ns: TestNamespaces;
  let fleet: Fleet;
  beforeAll(async () => ({ ns, fleet } = await fleetIn("rep-kill")), 600_000);
  afterAll(async () => {
    await fleet?.close();
    await ns?.cleanup();
  }, 120_000);

  it("within the lease + 5 s the budget equals live usage and the survivors admit into the freed share", async () => {
    await settled(fleet, ns.runtime);
    const [victim, ...survivors] = fleet.managers;
    const s = sampler(fleet, ns);
    // a first wave fills about half of every share, then the victim dies while a second wave runs
    const first = await burst(fleet, Math.floor(BUDGET / 2));
    const second = burst(fleet, BUDGET);
    await victim.kill("SIGKILL");
    const killedAt = Date.now();
    const during = await second;
    const admittedBefore = [...first, ...during].filter((o) => o.status === 201).length;
    expectCleanRejects([...first, ...during]);

    // the victim's share is gone and what it admitted counts from its live records
    await waitFor(
      "the dead replica's share is reclaimed",
      async () => !Object.hasOwn((await readShares(clients, ns.runtime)).replicas, victim.identity),
      (LEASE_SECONDS + 5) * 1000,
    );
    const reclaimedMs = Date.now() - killedAt;
    expect(reclaimedMs).toBeLessThanOrEqual((LEASE_SECONDS + 5) * 1000);
    const records = await liveRecords(clients, ns.sandboxes);
    const orphaned = records.by.get(victim.identity) ?? 0;
    expect(orphaned).toBeGreaterThan(0);

    // survivors admit into the freed share until the budget equals live usage
    const after: CreateOutcome[] = [];
    await waitFor(
      "survivors fill the budget up to live usage",
      async () => {
        after.push(...(await Promise.all(Array.from({ length: 20 }, (_, i) => createVia(survivors[i % 2])))));
        return (await liveRecords(clients, ns.sandboxes)).total >= BUDGET - 2;
      },
      60_000,
    );
    await s.stop();
    expect(s.over).toEqual([]);
    expectCleanRejects(after);
    const final = await liveRecords(clients, ns.sandboxes);
    expect(final.total).toBeLessThanOrEqual(BUDGET);
    // what the survivors admitted after the kill went beyond their old fair parts: the freed share moved
    const bySurvivors = survivors.reduce((sum, r) => sum + (final.by.get(r.identity) ?? 0), 0);
    expect(bySurvivors).toBeGreaterThan(Math.floor(BUDGET / 3) * 2);
    const doc = await readShares(clients, ns.runtime);
    expect(sumShares(doc) + orphaned * NANO_CPU).toBeLessThanOrEqual(BUDGET * NANO_CPU);
    expect(admittedBefore).toBeGreaterThan(0);
    expect(final.quotaExceeded).toBe(0);
  });
});
