// Admission against one replica's share of a shared budget (runtime/k8s/budget): the share is
// the limit, only this replica's sandboxes count, and a reject says it was the share.
import { describe, expect, it } from "vitest";
import { Admission, type AdmissionScope, type Budget } from "./admission.ts";
import { CapacityError } from "./errors.ts";
import { Metrics } from "./metrics.ts";
import type { Sandbox } from "./types.ts";

const nano = { name: "nano", cpuRequestMillis: 100, memoryRequestBytes: 128 * 2 ** 20 };
const BUDGET = { cpuMillis: 1000, memoryBytes: 10 * 2 ** 30 };

function scoped(share: Budget, mine: (id: string) => boolean = () => true) {
  const s = { share, used: undefined as undefined | (() => Budget) };
  const scope: AdmissionScope = {
    limit: () => s.share,
    counts: mine,
    attach: (used) => (s.used = used),
  };
  return { s, a: new Admission(BUDGET, { scope }) };
}

const live = (id: string): Sandbox =>
  ({ id, phase: "Running", cpuRequestMillis: 100, memoryRequestBytes: nano.memoryRequestBytes }) as Sandbox;

describe("admission within a replica's share", () => {
  it("admits up to the share, not the budget, and follows the share as it moves", () => {
    const { s, a } = scoped({ cpuMillis: 200, memoryBytes: BUDGET.memoryBytes });
    a.admit({ id: "a", size: nano });
    a.admit({ id: "b", size: nano });
    const err = (() => {
      try {
        a.admit({ id: "c", size: nano });
      } catch (e) {
        return e;
      }
    })() as CapacityError;
    expect(err).toBeInstanceOf(CapacityError);
    expect(err.message).toContain(
      "short on cpu (requested 100m, free 0 of 200m) (this replica's share of the budget of cpu 1",
    );
    expect(err.details).toMatchObject({ reason: "replica_share", short: ["cpu"] });
    expect(err.retryAfterSeconds).toBeGreaterThan(0);
    s.share = { cpuMillis: 300, memoryBytes: BUDGET.memoryBytes };
    expect(a.admit({ id: "c", size: nano }).id).toBe("c");
    expect(a.usage().budget.cpuMillis).toBe(300);
    expect(s.used?.()).toEqual({ cpuMillis: 300, memoryBytes: 3 * nano.memoryRequestBytes });
  });

  it("counts only the sandboxes this replica admitted, at rebuild and on events", () => {
    const { a } = scoped(BUDGET, (id) => id.startsWith("mine-"));
    const { adopted } = a.rebuild([live("mine-1"), live("theirs-1")]);
    expect(adopted).toEqual(["mine-1"]);
    expect(a.adopt(live("theirs-2"))).toBe(false);
    expect(a.usage().used.cpuMillis).toBe(100);
  });

  it("a fenced replica (share zero) admits nothing, and says why", () => {
    const a = new Admission(BUDGET, {
      scope: { limit: () => ({ cpuMillis: 0, memoryBytes: 0 }), counts: () => true, fenced: () => true },
    });
    expect(() => a.admit({ id: "x", size: nano })).toThrow(/short on cpu .* and memory .*could not renew its share/);
    try {
      a.admit({ id: "x", size: nano });
    } catch (err) {
      expect((err as CapacityError).details).toMatchObject({ reason: "replica_fenced" });
    }
  });
});

describe("per-replica metrics of a shared budget", () => {
  it("export the share, used, free, share moves and fencing", async () => {
    const stats = { moves: { grow: 2, shrink: 1 }, replicas: 3, fenced: false };
    const a = new Admission(BUDGET, {
      scope: { limit: () => ({ cpuMillis: 300, memoryBytes: 2 ** 30 }), counts: () => true, stats: () => stats },
    });
    a.admit({ id: "a", size: nano });
    const m = new Metrics({ admission: () => a.usage(), sandboxes: () => [] }, { defaultMetrics: false });
    const text = await m.registry.metrics();
    expect(text).toContain('sbx_budget_share{resource="cpu_millis"} 300');
    expect(text).toContain('sbx_budget_used{resource="cpu_millis"} 100');
    expect(text).toContain('sbx_budget_free{resource="cpu_millis"} 200');
    expect(text).toContain('sbx_budget_share_moves_total{direction="grow"} 2');
    expect(text).toContain("sbx_budget_share_fenced 0");
    // a counter only goes up: a later scrape adds what the ledger counted since
    stats.moves = { grow: 5, shrink: 1 };
    stats.fenced = true;
    const again = await m.registry.metrics();
    expect(again).toContain('sbx_budget_share_moves_total{direction="grow"} 5');
    expect(again).toContain("sbx_budget_share_fenced 1");
  });

  it("export lost compare-and-swaps, abandoned rounds and the age of the last renewal", async () => {
    const stats = {
      moves: { grow: 0, shrink: 0 },
      replicas: 3,
      fenced: false,
      conflicts: 4,
      abandoned: 1,
      renewedAgoMs: 1500,
    };
    const a = new Admission(BUDGET, {
      scope: { limit: () => ({ cpuMillis: 300, memoryBytes: 2 ** 30 }), counts: () => true, stats: () => stats },
    });
    const m = new Metrics({ admission: () => a.usage(), sandboxes: () => [] }, { defaultMetrics: false });
    const text = await m.registry.metrics();
    expect(text).toContain("sbx_budget_share_conflicts_total 4");
    expect(text).toContain("sbx_budget_share_rounds_abandoned_total 1");
    expect(text).toContain("sbx_budget_share_renewal_age_seconds 1.5");
    Object.assign(stats, { conflicts: 9, abandoned: 1, renewedAgoMs: 8000 });
    const again = await m.registry.metrics();
    expect(again).toContain("sbx_budget_share_conflicts_total 9");
    expect(again).toContain("sbx_budget_share_rounds_abandoned_total 1");
    expect(again).toContain("sbx_budget_share_renewal_age_seconds 8");
  });
});

describe("warm claims written behind, on /metrics", () => {
  it("counts taken, landed and lost claims and shows the pending writes", async () => {
    const c = { taken: 3, landed: 1, lost: 0, pending: 2, withChannel: 2, primedChannels: 5 };
    const a = new Admission(BUDGET);
    const m = new Metrics(
      { admission: () => a.usage(), sandboxes: () => [], claims: () => c },
      { defaultMetrics: false },
    );
    const text = await m.registry.metrics();
    expect(text).toContain('sbx_warm_claims_total{outcome="taken"} 3');
    expect(text).toContain('sbx_warm_claims_total{outcome="landed"} 1');
    expect(text).toContain("sbx_warm_claims_pending 2");
    expect(text).toContain("sbx_warm_claims_with_channel_total 2");
    expect(text).toContain("sbx_warm_channels_primed 5");
    Object.assign(c, { taken: 4, landed: 3, lost: 1, pending: 0, withChannel: 3, primedChannels: 4 });
    const again = await m.registry.metrics();
    expect(again).toContain('sbx_warm_claims_total{outcome="taken"} 4');
    expect(again).toContain('sbx_warm_claims_total{outcome="landed"} 3');
    expect(again).toContain('sbx_warm_claims_total{outcome="lost"} 1');
    expect(again).toContain("sbx_warm_claims_pending 0");
    expect(again).toContain("sbx_warm_claims_with_channel_total 3");
    expect(again).toContain("sbx_warm_channels_primed 4");
  });

  it("counts port connections by the path that carried them", async () => {
    const p = { channel: 2, portForward: 0 };
    const m = new Metrics(
      { admission: () => new Admission(BUDGET).usage(), sandboxes: () => [], ports: () => p },
      { defaultMetrics: false },
    );
    expect(await m.registry.metrics()).toContain('sbx_port_connections_total{path="channel"} 2');
    Object.assign(p, { channel: 5, portForward: 1 });
    const again = await m.registry.metrics();
    expect(again).toContain('sbx_port_connections_total{path="channel"} 5');
    expect(again).toContain('sbx_port_connections_total{path="port-forward"} 1');
  });

  it("counts snapshot layers by op and by who moved them", async () => {
    const l = { podPush: 2, replicaPush: 0, podRestore: 1, replicaRestore: 0 };
    const m = new Metrics(
      { admission: () => new Admission(BUDGET).usage(), sandboxes: () => [], layers: () => l },
      { defaultMetrics: false },
    );
    const text = await m.registry.metrics();
    expect(text).toContain('sbx_snapshot_layers_total{op="push",path="pod"} 2');
    expect(text).toContain('sbx_snapshot_layers_total{op="restore",path="pod"} 1');
    expect(text).toContain('sbx_snapshot_layers_total{op="push",path="replica"} 0');
    Object.assign(l, { podPush: 3, replicaPush: 2, replicaRestore: 4 });
    const again = await m.registry.metrics();
    expect(again).toContain('sbx_snapshot_layers_total{op="push",path="pod"} 3');
    expect(again).toContain('sbx_snapshot_layers_total{op="push",path="replica"} 2');
    expect(again).toContain('sbx_snapshot_layers_total{op="restore",path="replica"} 4');
    expect(again).toContain('sbx_snapshot_layers_total{op="restore",path="pod"} 1');
  });

  it("has no such series on a backend without write-behind claims", async () => {
    const m = new Metrics(
      { admission: () => new Admission(BUDGET).usage(), sandboxes: () => [] },
      { defaultMetrics: false },
    );
    const text = await m.registry.metrics();
    expect(text).not.toMatch(/sbx_warm_claims_pending \d/);
    expect(text).not.toMatch(/sbx_warm_channels_primed \d/);
  });
});
