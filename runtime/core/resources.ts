// Per-sandbox resource figures as values: a sample made from two raw readings (CPU is a running
// total, so its rate needs the previous one), the bounded history of one sandbox, the time range a
// caller asks for, and when memory pressure deserves a warning. Pure: the sampler
// (resourceSampler.ts) reads the platform and keeps the histories; this decides what they hold.
//
// A history is a ring of columns (one Float64Array per figure) rather than an array of objects:
// an hour at 5 s is 720 samples, and 1,000 sandboxes of objects with a dozen fields each would
// cost the heap and the collector far more than 1,000 x 720 x 56 bytes (40 MB) of flat arrays.
import { ValidationError } from "./errors.ts";
import type { ResourceLimits, ResourceReading, ResourceSample, SizeClass } from "./types.ts";

/** The limits of a size class (a sandbox not sampled yet); zeros for a size no longer configured. */
export function limitsOfSize(size: SizeClass | undefined): ResourceLimits {
  return {
    cpuCores: (size?.cpuLimitMillis ?? 0) / 1000,
    memoryBytes: size?.memoryLimitBytes ?? 0,
    pids: size?.pids ?? 0,
    workspaceBytes: size?.workspaceBytes ?? 0,
  };
}

export function limitsOf(r: ResourceReading): ResourceLimits {
  return {
    cpuCores: r.cpuLimitMillis / 1000,
    memoryBytes: r.memoryLimitBytes,
    pids: r.pidsLimit,
    workspaceBytes: r.workspaceBytes,
  };
}

/** The figures of `cur`, with its CPU rate from `prev` (the previous reading of the same sandbox). */
export function planSample(
  cur: ResourceReading,
  atMs: number,
  prev?: { atMs: number; cpuUsageUsec?: number },
): ResourceSample {
  const s: ResourceSample = { at: new Date(atMs).toISOString() };
  const dtMs = prev ? atMs - prev.atMs : 0;
  if (prev?.cpuUsageUsec !== undefined && cur.cpuUsageUsec !== undefined && dtMs > 0) {
    // a counter that went back (a resumed sandbox is a new cgroup) reads as idle, not negative
    const usedUsec = Math.max(0, cur.cpuUsageUsec - prev.cpuUsageUsec);
    s.cpuCores = usedUsec / 1000 / dtMs;
    s.cpuPct = cur.cpuLimitMillis > 0 ? (s.cpuCores * 100_000) / cur.cpuLimitMillis : undefined;
  }
  s.memoryBytes = cur.memoryBytes;
  s.memoryCacheBytes = cur.memoryCacheBytes;
  s.memoryWorkingSetBytes = cur.memoryWorkingSetBytes;
  const held = cur.memoryWorkingSetBytes ?? cur.memoryBytes;
  if (held !== undefined && cur.memoryLimitBytes > 0) s.memoryPct = (held * 100) / cur.memoryLimitBytes;
  s.pids = cur.pids;
  s.workspaceUsedBytes = cur.workspaceUsedBytes;
  return s;
}

const COLUMNS = [
  "cpuCores",
  "cpuPct",
  "memoryBytes",
  "memoryCacheBytes",
  "memoryWorkingSetBytes",
  "memoryPct",
  "pids",
  "workspaceUsedBytes",
] as const;

/** The last `capacity` samples of one sandbox, oldest overwritten first. */
export class ResourceHistory {
  private readonly times: Float64Array;
  private readonly cols: Float64Array[];
  private next = 0;
  private count = 0;

  constructor(
    readonly capacity: number,
    public limits: ResourceLimits,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`history capacity ${capacity}`);
    this.times = new Float64Array(capacity);
    this.cols = COLUMNS.map(() => new Float64Array(capacity));
  }

  get size(): number {
    return this.count;
  }

  push(s: ResourceSample): void {
    const i = this.next;
    this.times[i] = Date.parse(s.at);
    COLUMNS.forEach((k, c) => {
      this.cols[c][i] = s[k] ?? Number.NaN;
    });
    this.next = (i + 1) % this.capacity;
    this.count = Math.min(this.count + 1, this.capacity);
  }

  /** the newest sample's time, ms (NaN when empty) */
  lastAtMs(): number {
    return this.count ? this.times[(this.next - 1 + this.capacity) % this.capacity] : Number.NaN;
  }

  latest(): ResourceSample | undefined {
    return this.count ? this.at((this.next - 1 + this.capacity) % this.capacity) : undefined;
  }

  /** samples with startMs <= time <= endMs, oldest first */
  range(startMs = -Infinity, endMs = Infinity): ResourceSample[] {
    const out: ResourceSample[] = [];
    const first = (this.next - this.count + this.capacity) % this.capacity;
    for (let n = 0; n < this.count; n++) {
      const i = (first + n) % this.capacity;
      if (this.times[i] >= startMs && this.times[i] <= endMs) out.push(this.at(i));
    }
    return out;
  }

  private at(i: number): ResourceSample {
    const s: ResourceSample = { at: new Date(this.times[i]).toISOString() };
    COLUMNS.forEach((k, c) => {
      const v = this.cols[c][i];
      if (!Number.isNaN(v)) s[k] = v;
    });
    return s;
  }
}

/** How many samples an hour (or whatever the window is) holds at the interval. */
export function historyCapacity(historySeconds: number, intervalMs: number): number {
  return Math.max(1, Math.ceil((historySeconds * 1000) / intervalMs));
}

/**
 * A time bound from a query: Unix seconds ("1767225600") or an ISO 8601 time. Absent: undefined.
 * Throws ValidationError naming the parameter, the value and the accepted forms.
 */
export function resolveTimeBound(field: string, value: unknown): number | undefined {
  if (value === undefined || value === "") return undefined;
  if (typeof value === "string" && /^[0-9]{1,12}$/.test(value)) return Number(value) * 1000;
  if (typeof value === "number" && Number.isFinite(value) && value >= 0) return value * 1000;
  const ms = typeof value === "string" && /^\d{4}-\d\d-\d\dT/.test(value) ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(ms))
    throw new ValidationError(
      field,
      value,
      "use Unix seconds (e.g. 1767225600) or an ISO 8601 time (2026-01-01T00:00:00Z)",
    );
  return ms;
}

/** The [start, end] a metrics query asks for, in ms; start after end is a ValidationError. */
export function resolveMetricsRange(q: { start?: unknown; end?: unknown }): { startMs?: number; endMs?: number } {
  const startMs = resolveTimeBound("start", q.start);
  const endMs = resolveTimeBound("end", q.end);
  if (startMs !== undefined && endMs !== undefined && startMs > endMs)
    throw new ValidationError("start", q.start, `must not be after end (${String(q.end)}); swap them or drop one`);
  return { startMs, endMs };
}

/**
 * Whether to warn about memory now: once when the sandbox goes over `fraction` of its limit, and
 * again only after it went back under fraction - `rearm` (so a sandbox hovering at the line does
 * not warn every tick). Returns the new state and whether this sample warns.
 */
export function decideMemoryWarning(
  wasHigh: boolean,
  memoryPct: number | undefined,
  fraction: number,
  rearm = 0.05,
): { high: boolean; warn: boolean } {
  if (memoryPct === undefined) return { high: wasHigh, warn: false };
  const pct = memoryPct / 100;
  if (!wasHigh && pct >= fraction) return { high: true, warn: true };
  if (wasHigh && pct < fraction - rearm) return { high: false, warn: false };
  return { high: wasHigh, warn: false };
}
