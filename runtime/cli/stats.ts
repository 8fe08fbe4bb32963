// Latency statistics for `sbx bench`: nearest-rank percentiles (exact on the samples, no
// interpolation, so p99 of 100 samples is the 99th smallest).

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  if (p <= 0) return sorted[0];
  if (p >= 100) return sorted[sorted.length - 1];
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.max(0, rank - 1)];
}

export interface LatencySummary {
  count: number;
  minMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
}

export function summarize(samplesMs: readonly number[]): LatencySummary {
  const s = [...samplesMs].sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 1000) / 1000;
  return {
    count: s.length,
    minMs: round(s[0] ?? Number.NaN),
    p50Ms: round(percentile(s, 50)),
    p90Ms: round(percentile(s, 90)),
    p99Ms: round(percentile(s, 99)),
    maxMs: round(s[s.length - 1] ?? Number.NaN),
    meanMs: round(s.reduce((a, b) => a + b, 0) / (s.length || Number.NaN)),
  };
}
