// The resource sampler: every sampleIntervalMs one Backend.readResources() of every live sandbox,
// each reading turned into a sample (resources.ts) and kept in that sandbox's bounded history;
// per-owner totals of the latest samples for Prometheus; a warning in the log and the sandbox's
// events when its memory passes memoryWarnFraction of its limit (once per crossing). The Manager
// owns it and runs tick() as a maintenance task on its clock; a sandbox's history goes when the
// sandbox does (forget), or when nothing was read of it for a whole history window.
import type { Clock } from "./clock.ts";
import type { Logger } from "./log.ts";
import { decideMemoryWarning, historyCapacity, limitsOf, planSample, ResourceHistory } from "./resources.ts";
import type { ResourceEvent, ResourceLimits, ResourceReading, ResourceSample, SandboxResources } from "./types.ts";

export interface ResourceSamplerOptions {
  read(): Promise<ResourceReading[]>;
  clock: Clock;
  logger: Logger;
  intervalMs: number;
  historySeconds: number;
  memoryWarnFraction: number;
  /** called once per warning (a Prometheus counter) */
  onWarning?(id: string, owner: string): void;
}

export interface OwnerResourceTotals {
  owner: string;
  /** sandboxes with a sample this window */
  sandboxes: number;
  cpuCores: number;
  memoryBytes: number;
  workspaceUsedBytes: number;
}

const EVENTS_KEPT = 20;

interface Tracked {
  owner: string;
  history: ResourceHistory;
  prev: { atMs: number; cpuUsageUsec?: number };
  memoryHigh: boolean;
  events: ResourceEvent[];
}

export class ResourceSampler {
  private readonly tracked = new Map<string, Tracked>();
  private readonly capacity: number;

  constructor(private readonly o: ResourceSamplerOptions) {
    this.capacity = historyCapacity(o.historySeconds, o.intervalMs);
  }

  get intervalMs(): number {
    return this.o.intervalMs;
  }

  /** Reads every live sandbox once and records what came back. */
  async tick(): Promise<void> {
    const readings = await this.o.read();
    const nowMs = this.o.clock.now().getTime();
    for (const r of readings) this.record(r, nowMs);
    // a sandbox that left without its delete reaching us: nothing read of it for a whole window
    const staleBefore = nowMs - this.o.historySeconds * 1000;
    for (const [id, t] of this.tracked) if (t.prev.atMs < staleBefore) this.tracked.delete(id);
  }

  private record(r: ResourceReading, nowMs: number): void {
    let t = this.tracked.get(r.id);
    if (!t || t.owner !== r.owner) {
      t = {
        owner: r.owner,
        history: new ResourceHistory(this.capacity, limitsOf(r)),
        prev: { atMs: nowMs },
        memoryHigh: false,
        events: [],
      };
      this.tracked.set(r.id, t);
      // the first reading only gives CPU a starting point
      const first = planSample(r, nowMs);
      t.history.push(first);
      t.prev = { atMs: nowMs, cpuUsageUsec: r.cpuUsageUsec };
      this.checkMemory(r, t, first);
      return;
    }
    const s = planSample(r, nowMs, t.prev);
    t.prev = { atMs: nowMs, cpuUsageUsec: r.cpuUsageUsec };
    t.history.limits = limitsOf(r);
    t.history.push(s);
    this.checkMemory(r, t, s);
  }

  private checkMemory(r: ResourceReading, t: Tracked, s: ResourceSample): void {
    const d = decideMemoryWarning(t.memoryHigh, s.memoryPct, this.o.memoryWarnFraction);
    t.memoryHigh = d.high;
    if (!d.warn) return;
    const used = s.memoryWorkingSetBytes ?? s.memoryBytes ?? 0;
    const message =
      `memory at ${Math.round(s.memoryPct ?? 0)}% of its limit (${mib(used)} of ${mib(r.memoryLimitBytes)} MiB); ` +
      "past 100% the kernel kills its largest process: free memory or use a larger size class";
    t.events.push({ at: s.at, type: "memory-high", message });
    if (t.events.length > EVENTS_KEPT) t.events.shift();
    this.o.logger.warn(
      { sandbox: r.id, owner: r.owner, op: "resources", memoryBytes: used, memoryLimitBytes: r.memoryLimitBytes },
      `sandbox ${message}`,
    );
    this.o.onWarning?.(r.id, r.owner);
  }

  /** Its limits, samples in [startMs, endMs] and events; undefined when nothing was read of it. */
  of(id: string, startMs?: number, endMs?: number): SandboxResources | undefined {
    const t = this.tracked.get(id);
    if (!t) return undefined;
    return {
      id,
      intervalMs: this.o.intervalMs,
      limits: { ...t.history.limits },
      samples: t.history.range(startMs, endMs),
      events: [...t.events],
    };
  }

  /** The newest sample of each of `ids` that has one, with its limits. */
  latestOf(ids: readonly string[]): { id: string; limits: ResourceLimits; sample: ResourceSample }[] {
    const out: { id: string; limits: ResourceLimits; sample: ResourceSample }[] = [];
    for (const id of ids) {
      const t = this.tracked.get(id);
      const sample = t?.history.latest();
      if (t && sample) out.push({ id, limits: { ...t.history.limits }, sample });
    }
    return out;
  }

  forget(id: string): void {
    this.tracked.delete(id);
  }

  /** How many sandboxes have a history now (bounded by the live ones plus a window of stale ones). */
  get trackedCount(): number {
    return this.tracked.size;
  }

  /** Per owner, the sum of each sandbox's newest sample no older than two intervals. */
  ownerTotals(): OwnerResourceTotals[] {
    const fresh = this.o.clock.now().getTime() - 2 * this.o.intervalMs;
    const by = new Map<string, OwnerResourceTotals>();
    for (const t of this.tracked.values()) {
      if (t.history.lastAtMs() < fresh) continue;
      const s = t.history.latest()!;
      let o = by.get(t.owner);
      if (!o) {
        o = { owner: t.owner, sandboxes: 0, cpuCores: 0, memoryBytes: 0, workspaceUsedBytes: 0 };
        by.set(t.owner, o);
      }
      o.sandboxes++;
      o.cpuCores += s.cpuCores ?? 0;
      o.memoryBytes += s.memoryWorkingSetBytes ?? s.memoryBytes ?? 0;
      o.workspaceUsedBytes += s.workspaceUsedBytes ?? 0;
    }
    return [...by.values()];
  }
}

function mib(bytes: number): string {
  return (bytes / 1048576).toFixed(1);
}
