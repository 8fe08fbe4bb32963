import { describe, expect, it } from "vitest";
import { nearestRank } from "./percentile.ts";

describe("nearestRank", () => {
  it.each<[number[], number, number | null]>([
    [[], 50, null],
    [[7], 50, 7],
    [[7], 95, 7],
    [[15, 20, 35, 40, 50], 5, 15],
    [[15, 20, 35, 40, 50], 30, 20],
    [[15, 20, 35, 40, 50], 40, 20],
    [[15, 20, 35, 40, 50], 50, 35],
    [[15, 20, 35, 40, 50], 100, 50],
    [[3, 1, 2], 50, 2],
    [[1, 2, 3, 4], 50, 2],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], 95, 19],
  ])("%j p%d = %j", (xs, p, want) => expect(nearestRank(xs, p)).toBe(want));

  it.each([0, -1, 101, Number.NaN])("rejects p=%d", (p) =>
    expect(() => nearestRank([1], p)).toThrow(/p must be in \(0, 100\]/),
  );

  it("property: the result is a sample with at least p% of samples <= it and fewer than p% below it", () => {
    let s = 12345;
    const rnd = () => {
      s = (s * 1103515245 + 12345) % 2 ** 31;
      return s / 2 ** 31;
    };
    for (let trial = 0; trial < 2000; trial++) {
      const n = 1 + Math.floor(rnd() * 60);
      const xs = Array.from({ length: n }, () => Math.floor(rnd() * 20));
      const p = trial % 3 === 0 ? 50 : trial % 3 === 1 ? 95 : 1 + Math.floor(rnd() * 100);
      const r = nearestRank(xs, p)!;
      const need = Math.ceil((p / 100) * n);
      expect(xs).toContain(r);
      expect(xs.filter((x) => x <= r).length).toBeGreaterThanOrEqual(need);
      expect(xs.filter((x) => x < r).length).toBeLessThan(need);
    }
  });
});
