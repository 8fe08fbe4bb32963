import { describe, expect, it } from "vitest";
import { percentile, summarize } from "./stats.ts";

describe("percentile (nearest rank)", () => {
  const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
  it.each([
    { xs: hundred, p: 50, want: 50 },
    { xs: hundred, p: 99, want: 99 },
    { xs: hundred, p: 100, want: 100 },
    { xs: hundred, p: 0, want: 1 },
    { xs: [7], p: 99, want: 7 },
    { xs: [1, 2, 3, 4], p: 50, want: 2 },
    { xs: [1, 2, 3, 4], p: 51, want: 3 },
  ])("p$p of $xs.length samples = $want", ({ xs, p, want }) => {
    expect(percentile(xs, p)).toBe(want);
  });
  it("empty is NaN", () => expect(percentile([], 50)).toBeNaN());

  // property: a percentile is always one of the samples and is monotone in p
  it.each([3, 17, 256])("is a sample and monotone in p (%i random samples)", (n) => {
    const xs = Array.from({ length: n }, () => Math.random() * 100).sort((a, b) => a - b);
    let prev = -Infinity;
    for (let p = 0; p <= 100; p += 0.5) {
      const v = percentile(xs, p);
      expect(xs).toContain(v);
      expect(v).toBeGreaterThanOrEqual(prev);
      prev = v;
    }
  });
});

describe("summarize", () => {
  it("sorts and summarizes", () => {
    expect(summarize([3, 1, 2])).toEqual({ count: 3, minMs: 1, p50Ms: 2, p90Ms: 3, p99Ms: 3, maxMs: 3, meanMs: 2 });
  });
});
