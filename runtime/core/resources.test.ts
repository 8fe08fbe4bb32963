// The resource figures' pure half: CPU rates from running totals, the ring's bound and order, the
// time range a query asks for (with the exact 400 messages), and the once-per-crossing warning.
import { describe, expect, it } from "vitest";
import { decideMemoryWarning, historyCapacity, planSample, ResourceHistory, resolveMetricsRange } from "./resources.ts";
import type { ResourceReading } from "./types.ts";

const MiB = 1024 * 1024;
const reading = (over: Partial<ResourceReading> = {}): ResourceReading => ({
  id: "s1",
  owner: "alice",
  cpuLimitMillis: 500,
  memoryLimitBytes: 100 * MiB,
  pidsLimit: 64,
  workspaceBytes: 1024 * MiB,
  ...over,
});
const limits = { cpuCores: 0.5, memoryBytes: 100 * MiB, pids: 64, workspaceBytes: 1024 * MiB };

describe("planSample", () => {
  it.each([
    // used usec over dt ms -> cores, percent of a 500m limit
    [0, 5_000_000, 10_000, 0.5, 100],
    [1_000_000, 1_250_000, 5_000, 0.05, 10],
    // a counter that went back (a resumed sandbox) reads as idle
    [9_000_000, 1_000, 5_000, 0, 0],
  ])("from %d to %d usec in %d ms: %d cores, %d%%", (before, after, dtMs, cores, pct) => {
    const s = planSample(reading({ cpuUsageUsec: after }), 1_000_000 + dtMs, {
      atMs: 1_000_000,
      cpuUsageUsec: before,
    });
    expect(s.cpuCores).toBeCloseTo(cores, 9);
    expect(s.cpuPct).toBeCloseTo(pct, 9);
  });

  it("has no CPU figure on the first reading, and memory as the working set's share", () => {
    const s = planSample(reading({ cpuUsageUsec: 5, memoryBytes: 80 * MiB, memoryWorkingSetBytes: 45 * MiB }), 0);
    expect(s.cpuCores).toBeUndefined();
    expect(s.memoryPct).toBe(45);
    expect(s.at).toBe("1970-01-01T00:00:00.000Z");
  });
});

describe("ResourceHistory", () => {
  it("keeps the last `capacity` samples, oldest first, and cuts by time", () => {
    const h = new ResourceHistory(3, limits);
    for (let i = 0; i < 7; i++) h.push({ at: new Date(i * 1000).toISOString(), memoryBytes: i });
    expect(h.size).toBe(3);
    expect(h.range().map((s) => s.memoryBytes)).toEqual([4, 5, 6]);
    expect(h.range(5000).map((s) => s.memoryBytes)).toEqual([5, 6]);
    expect(h.range(undefined, 4000).map((s) => s.memoryBytes)).toEqual([4]);
    expect(h.latest()?.memoryBytes).toBe(6);
    expect(h.range()[0]).not.toHaveProperty("cpuCores"); // absent stays absent
  });

  it.each([
    [3600, 5000, 720],
    [60, 5000, 12],
    [60, 7000, 9],
  ])("%d s at %d ms holds %d samples", (seconds, interval, n) => {
    expect(historyCapacity(seconds, interval)).toBe(n);
  });
});

describe("resolveMetricsRange", () => {
  it.each([
    [{}, {}],
    [{ start: "1767225600" }, { startMs: 1767225600000 }],
    [{ end: "2026-01-01T00:00:00Z" }, { endMs: Date.UTC(2026, 0, 1) }],
  ])("%j -> %j", (q, want) => {
    expect(resolveMetricsRange(q)).toEqual({ startMs: undefined, endMs: undefined, ...want });
  });

  it.each([
    [{ start: "yesterday" }, 'start: invalid value "yesterday"'],
    [{ end: "-5" }, "use Unix seconds"],
    [{ start: "2000", end: "1000" }, "must not be after end (1000)"],
  ])("%j is refused: %s", (q, msg) => {
    expect(() => resolveMetricsRange(q)).toThrow(msg);
  });
});

describe("decideMemoryWarning", () => {
  it("warns once per crossing, re-armed only below the line minus the margin", () => {
    let high = false;
    const warns: number[] = [];
    for (const pct of [50, 91, 95, 89, 91, 80, 92]) {
      const d = decideMemoryWarning(high, pct, 0.9);
      high = d.high;
      if (d.warn) warns.push(pct);
    }
    expect(warns).toEqual([91, 92]);
  });
});
