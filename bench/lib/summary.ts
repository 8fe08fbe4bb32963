// Summary rules shared by the benchmarks: percentiles only over successful measured trials
// (warmups never count, a failed trial contributes no partial timings), failure rate over
// measured trials, cleanup failures counted separately, and completed_requested_trials true
// only when every requested measured trial ran.
import { nearestRank } from "./percentile.ts";

export interface TrialRecord {
  type: "trial";
  index: number;
  warmup: boolean;
  ok: boolean;
  /** stage that failed, when !ok */
  failed_stage?: string;
  error?: string;
  cleanup_error?: string;
  timings: Record<string, number>;
}

export interface Summary {
  type: "summary";
  requested_samples: number;
  measured_trials: number;
  successful_trials: number;
  failed_trials: number;
  failure_rate: number | null;
  cleanup_failures: number;
  warmup_trials: number;
  warmup_failures: number;
  completed_requested_trials: boolean;
  metrics: Record<
    string,
    { n: number; p50: number | null; p95: number | null; min: number | null; max: number | null }
  >;
}

export function summarize(
  trials: readonly TrialRecord[],
  requestedSamples: number,
  metricNames: readonly string[],
): Summary {
  const measured = trials.filter((t) => !t.warmup);
  const ok = measured.filter((t) => t.ok);
  const metrics: Summary["metrics"] = {};
  for (const m of metricNames) {
    const xs = ok.map((t) => t.timings[m]).filter((x): x is number => typeof x === "number");
    metrics[m] = {
      n: xs.length,
      p50: nearestRank(xs, 50),
      p95: nearestRank(xs, 95),
      min: xs.length ? Math.min(...xs) : null,
      max: xs.length ? Math.max(...xs) : null,
    };
  }
  const warm = trials.filter((t) => t.warmup);
  return {
    type: "summary",
    requested_samples: requestedSamples,
    measured_trials: measured.length,
    successful_trials: ok.length,
    failed_trials: measured.length - ok.length,
    failure_rate: measured.length ? (measured.length - ok.length) / measured.length : null,
    cleanup_failures: trials.filter((t) => t.cleanup_error !== undefined).length,
    warmup_trials: warm.length,
    warmup_failures: warm.filter((t) => !t.ok).length,
    completed_requested_trials: measured.length === requestedSamples,
    metrics,
  };
}

/** Non-zero when any trial (warmups included) or cleanup failed, or the run stopped early. */
export function exitCodeFor(trials: readonly TrialRecord[], summary: Summary): number {
  return trials.some((t) => !t.ok || t.cleanup_error !== undefined) || !summary.completed_requested_trials ? 1 : 0;
}

export function formatTable(summary: Summary): string {
  const rows = Object.entries(summary.metrics).map(
    ([m, s]) => `${m.padEnd(22)} ${String(s.n).padStart(4)} ${fmt(s.p50)} ${fmt(s.p95)} ${fmt(s.min)} ${fmt(s.max)}`,
  );
  return [
    `${"metric".padEnd(22)} ${"n".padStart(4)} ${"p50".padStart(10)} ${"p95".padStart(10)} ${"min".padStart(10)} ${"max".padStart(10)}`,
    ...rows,
    `trials ${summary.successful_trials}/${summary.measured_trials} ok (requested ${summary.requested_samples}), failure rate ${summary.failure_rate ?? "n/a"}, cleanup failures ${summary.cleanup_failures}, complete ${summary.completed_requested_trials}`,
  ].join("\n");
}

function fmt(x: number | null): string {
  return (x === null ? "-" : x.toFixed(1)).padStart(10);
}
