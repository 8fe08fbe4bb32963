// Prometheus metrics on a registry of our own (no global state, so tests and several apps in
// one process don't collide). Histogram buckets start at 1 ms: the create-accept target is
// p50 <= 5 ms, which the reference design's 10 ms first bucket could not even show.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { AdmissionUsage } from "./admission.ts";
import { SbxError } from "./errors.ts";
import { resourceSeries } from "./metricsResources.ts";
import { teamSeries } from "./metricsTeams.ts";
import type { OwnerResourceTotals } from "./resourceSampler.ts";
import type { LayerPathStats, PortPathStats, Sandbox, SandboxPhase, WarmClaimStats } from "./types.ts";

export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const PHASES: SandboxPhase[] = [
  "Pending",
  "Running",
  "Pausing",
  "Paused",
  "Resuming",
  "Failed",
  "Succeeded",
  "Terminating",
];

export interface MetricsSources {
  admission: () => AdmissionUsage;
  /** the last listing the reaper took; sandboxes by phase is read from it, never listed per scrape */
  sandboxes: () => readonly Sandbox[];
  /** warm claims written behind (Kubernetes backend); absent: no such series */
  claims?: () => WarmClaimStats | undefined;
  /** port connections by path (Kubernetes backend); absent: no such series */
  ports?: () => PortPathStats | undefined;
  /** snapshot layers by the path that moved them (pause/resume configured); absent: no such series */
  layers?: () => LayerPathStats | undefined;
  /** per-owner totals of the resource sampler's newest samples; absent: the sampler is off */
  resources?: () => OwnerResourceTotals[];
}

export class Metrics {
  readonly registry = new Registry();
  readonly createAccept: Histogram<"outcome" | "path">;
  readonly wait: Histogram<"outcome">;
  readonly exec: Histogram<"outcome">;
  readonly claim: Histogram<"outcome">;
  readonly provision: Histogram<"outcome">;
  readonly admissionRejects: Counter;
  readonly renewalWaits: Histogram<"outcome">;
  readonly reaped: Counter<"reason">;
  /** sandboxes passing the memory warning line; present with sources.resources */
  readonly memoryWarnings?: Counter;

  // Over 60 lines on purpose: one declaration per metric, each a few lines, in the order /metrics lists them.
  constructor(sources: MetricsSources, opts: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: "sbx_process_" });
    this.createAccept = new Histogram({
      name: "sbx_create_accept_seconds",
      help: "create: request to accepted handle (admission, image, claim or provision), seconds",
      labelNames: ["outcome", "path"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.wait = new Histogram({
      name: "sbx_wait_seconds",
      help: "wait until ready, seconds",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.exec = new Histogram({
      name: "sbx_exec_seconds",
      help: "exec from request to exit, seconds",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.claim = new Histogram({
      name: "sbx_claim_seconds",
      help: "warm pool claim attempt, seconds (outcome hit|miss|error)",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.provision = new Histogram({
      name: "sbx_provision_seconds",
      help: "Backend.provision (cold path) until the substrate accepted, seconds; the backend's share of create-accept",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.admissionRejects = new Counter({
      name: "sbx_admission_rejects_total",
      help: "creates rejected by admission (429)",
      registers,
    });
    this.renewalWaits = new Histogram({
      name: "sbx_admission_renewal_wait_seconds",
      help: "creates that found this replica fenced by a late budget-share renewal and waited for it, seconds (outcome=renewed: admission then decided as usual; fenced: 429 replica_fenced)",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.reaped = new Counter({
      name: "sbx_reaped_total",
      help: "sandboxes deleted by the reaper",
      labelNames: ["reason"],
      registers,
    });
    new Gauge({
      name: "sbx_sandboxes",
      help: "sandboxes by phase (from the reaper's last listing)",
      labelNames: ["phase"],
      registers,
      collect() {
        const counts = new Map<string, number>(PHASES.map((p) => [p, 0]));
        for (const s of sources.sandboxes()) counts.set(s.phase, (counts.get(s.phase) ?? 0) + 1);
        for (const [phase, n] of counts) this.set({ phase }, n);
      },
    });
    new Gauge({
      name: "sbx_budget_used",
      help: "admission budget reserved (resource=cpu_millis|memory_bytes)",
      labelNames: ["resource"],
      registers,
      collect() {
        const u = sources.admission();
        this.set({ resource: "cpu_millis" }, u.used.cpuMillis);
        this.set({ resource: "memory_bytes" }, u.used.memoryBytes);
      },
    });
    const claims = sources.claims;
    if (claims) this.claimSeries(claims, registers);
    if (sources.ports) this.portSeries(sources.ports, registers);
    if (sources.layers) this.layerSeries(sources.layers, registers);
    new Gauge({
      name: "sbx_budget_total",
      help: "the whole admission budget as configured (resource=cpu_millis|memory_bytes), however many replicas share it",
      labelNames: ["resource"],
      registers,
      collect() {
        const u = sources.admission();
        this.set({ resource: "cpu_millis" }, u.total.cpuMillis);
        this.set({ resource: "memory_bytes" }, u.total.memoryBytes);
      },
    });
    new Gauge({
      name: "sbx_budget_share",
      help: "what this replica admits against (resource=cpu_millis|memory_bytes): its share when several replicas share the budget, else the whole budget",
      labelNames: ["resource"],
      registers,
      collect() {
        const u = sources.admission();
        this.set({ resource: "cpu_millis" }, u.budget.cpuMillis);
        this.set({ resource: "memory_bytes" }, u.budget.memoryBytes);
      },
    });
    let moved = { grow: 0, shrink: 0 };
    new Counter({
      name: "sbx_budget_share_moves_total",
      help: "changes of this replica's budget share it wrote (direction=grow|shrink); zero with one replica",
      labelNames: ["direction"],
      registers,
      collect() {
        const m = sources.admission().shared?.moves;
        if (!m) return;
        // the ledger counts; a counter only goes up, so add what it counted since the last scrape
        this.inc({ direction: "grow" }, Math.max(0, m.grow - moved.grow));
        this.inc({ direction: "shrink" }, Math.max(0, m.shrink - moved.shrink));
        moved = { ...m };
      },
    });
    new Gauge({
      name: "sbx_budget_share_fenced",
      help: "1 while this replica admits nothing because it could not renew its budget share (API server unreachable)",
      registers,
      collect() {
        this.set(sources.admission().shared?.fenced ? 1 : 0);
      },
    });
    this.shareRenewalSeries(sources, registers);
    teamSeries(sources.admission, registers);
    if (sources.resources) this.memoryWarnings = resourceSeries(sources.resources, registers);
    new Gauge({
      name: "sbx_budget_free",
      help: "admission budget free (resource=cpu_millis|memory_bytes); negative when live sandboxes exceed it",
      labelNames: ["resource"],
      registers,
      collect() {
        const u = sources.admission();
        this.set({ resource: "cpu_millis" }, u.free.cpuMillis);
        this.set({ resource: "memory_bytes" }, u.free.memoryBytes);
      },
    });
  }

  /**
   * How the budget-share renewals fare (a shared budget only): lost compare-and-swaps, rounds
   * that lost every try, and how long ago the last renewal landed, which fences the replica at
   * half a lease. The early warning for a replica about to refuse work it has room for.
   */
  private shareRenewalSeries(sources: MetricsSources, registers: Registry[]): void {
    const shared = () => sources.admission().shared;
    const counted = (key: "conflicts" | "abandoned") =>
      countedSince(
        () => {
          const s = shared();
          return s ? { n: s[key] ?? 0 } : undefined;
        },
        ["n"] as const,
      );
    const conflicts = counted("conflicts");
    const abandoned = counted("abandoned");
    new Counter({
      name: "sbx_budget_share_conflicts_total",
      help: "compare-and-swaps of the shared budget document this replica lost to another replica's write (retried at once)",
      registers,
      collect() {
        conflicts((_, by) => this.inc(by));
      },
    });
    new Counter({
      name: "sbx_budget_share_rounds_abandoned_total",
      help: "budget-share rounds that lost every compare-and-swap and wrote nothing (retried the next tick)",
      registers,
      collect() {
        abandoned((_, by) => this.inc(by));
      },
    });
    new Gauge({
      name: "sbx_budget_share_renewal_age_seconds",
      help: "seconds since this replica's last budget-share write that landed was sent; it fences itself at half the lease",
      registers,
      collect() {
        const ago = shared()?.renewedAgoMs;
        if (ago !== undefined) this.set(ago / 1000);
      },
    });
  }

  /** Warm claims written behind: only for a backend that has them (absent elsewhere, not zero). */
  private claimSeries(claims: () => WarmClaimStats | undefined, registers: Registry[]): void {
    const since = countedSince(claims, ["taken", "landed", "lost"] as const);
    new Counter({
      name: "sbx_warm_claims_total",
      help: "warm claims decided in memory and written behind (outcome=taken|landed|lost; lost: the sandbox went cold)",
      labelNames: ["outcome"],
      registers,
      collect() {
        since((outcome, by) => this.inc({ outcome }, by));
      },
    });
    new Gauge({
      name: "sbx_warm_claims_pending",
      help: "warm claims whose pod write has not settled yet",
      registers,
      collect() {
        const c = claims();
        if (c) this.set(c.pending);
      },
    });
    const withChannel = countedSince(claims, ["withChannel"] as const);
    new Counter({
      name: "sbx_warm_claims_with_channel_total",
      help: "warm claims whose pod's command channel was open before the claim (primed), so neither its credentials nor its first command opened one",
      registers,
      collect() {
        withChannel((_k, by) => this.inc(by));
      },
    });
    new Gauge({
      name: "sbx_warm_channels_primed",
      help: "command channels open or opening to warm pods this replica may claim, ahead of the claim",
      registers,
      collect() {
        const c = claims();
        if (c) this.set(c.primedChannels);
      },
    });
  }

  private layerSeries(layers: () => LayerPathStats | undefined, registers: Registry[]): void {
    const since = countedSince(layers, ["podPush", "replicaPush", "podRestore", "replicaRestore"] as const);
    new Counter({
      name: "sbx_snapshot_layers_total",
      help: "snapshot layers moved (op=push|restore) by who moved the bytes (path=pod: the sandbox's pod, straight to the registry; replica: this process, the archive path and every fallback)",
      labelNames: ["op", "path"],
      registers,
      collect() {
        since((k, by) =>
          this.inc({ op: k.endsWith("Push") ? "push" : "restore", path: k.startsWith("pod") ? "pod" : "replica" }, by),
        );
      },
    });
  }

  private portSeries(ports: () => PortPathStats | undefined, registers: Registry[]): void {
    const since = countedSince(ports, ["channel", "portForward"] as const);
    new Counter({
      name: "sbx_port_connections_total",
      help: "connections to sandbox ports by path (path=channel: over the pod's command channel; port-forward: the API server's)",
      labelNames: ["path"],
      registers,
      collect() {
        since((k, by) => this.inc({ path: k === "channel" ? "channel" : "port-forward" }, by));
      },
    });
  }
}

/** A backend's running counts as a counter: what it counted since the last scrape is added. */
function countedSince<K extends string>(read: () => Record<K, number> | undefined, keys: readonly K[]) {
  let seen: Partial<Record<K, number>> = {};
  return (inc: (key: K, by: number) => void) => {
    const now = read();
    if (!now) return;
    for (const k of keys) inc(k, Math.max(0, now[k] - (seen[k] ?? 0)));
    seen = { ...now };
  };
}

/** Seconds since `startNs` (process.hrtime.bigint()). */
export function secondsSince(startNs: bigint): number {
  return Number(process.hrtime.bigint() - startNs) / 1e9;
}

/** The outcome label of a failed call: the domain error's code, or "internal". */
export function errorCode(err: unknown): string {
  return err instanceof SbxError ? err.code : "internal";
}

/** Runs `fn` and observes its duration in `histogram`, labelled with the outcome of the result or the error. */
export async function observed<T>(
  histogram: Histogram<"outcome">,
  fn: () => Promise<T>,
  outcomeOf: (result: T) => string = () => "ok",
  failureOf: (err: unknown) => string = errorCode,
): Promise<T> {
  const t0 = process.hrtime.bigint();
  try {
    const result = await fn();
    histogram.observe({ outcome: outcomeOf(result) }, secondsSince(t0));
    return result;
  } catch (err) {
    histogram.observe({ outcome: failureOf(err) }, secondsSince(t0));
    throw err;
  }
}
