// Nearest-rank percentile: the smallest sample such that at least p% of samples are <= it.
// No interpolation, so every reported value is a real measured sample. Empty -> null.
export function nearestRank(values: readonly number[], p: number): number | null {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile: p must be in (0, 100], got ${p}`);
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[rank - 1];
}
