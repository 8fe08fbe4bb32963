// A Prometheus histogram over a window of a run: the cumulative bucket counts of one series read
// from a text exposition at the window's start and end, their difference, and the quantile as
// the upper bound of the bucket that holds it (a histogram knows no finer). Benchmarks read the
// replicas' own /metrics this way so that what the service counted before the window (the
// sandboxes the scenario set up) does not dilute what it counted under load.

/** le (seconds; +Inf as Infinity) -> cumulative count, summed over the series' matching lines */
export type Buckets = Map<number, number>;

/**
 * The `<name>_bucket` lines of `text` whose labels include every `labels` pair, summed per `le`
 * (so the same series from several replicas, or several label values, add up).
 */
export function parseBuckets(text: string, name: string, labels: Record<string, string> = {}): Buckets {
  const out: Buckets = new Map();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}_bucket{`)) continue;
    const close = line.lastIndexOf("}");
    const labelText = line.slice(name.length + 8, close);
    if (!want.every((w) => labelText.split(",").includes(w))) continue;
    const le = /(?:^|,)le="([^"]+)"/.exec(labelText)?.[1];
    if (le === undefined) continue;
    const bound = le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le);
    out.set(bound, (out.get(bound) ?? 0) + Number(line.slice(close + 1).trim()));
  }
  return out;
}

/** Adds bucket maps (e.g. one per replica). */
export function sumBuckets(parts: readonly Buckets[]): Buckets {
  const out: Buckets = new Map();
  for (const b of parts) for (const [le, n] of b) out.set(le, (out.get(le) ?? 0) + n);
  return out;
}

/**
 * What was counted between two reads of the same histogram. A counter that went down (the
 * process restarted between the reads) is a broken window, not a negative count: it throws.
 */
export function bucketDelta(after: Buckets, before: Buckets): Buckets {
  const out: Buckets = new Map();
  for (const [le, n] of after) {
    const d = n - (before.get(le) ?? 0);
    if (d < 0) throw new RangeError(`histogram bucket le=${le} went from ${before.get(le)} to ${n}: counter reset`);
    out.set(le, d);
  }
  return out;
}

/** Observations in the window: the +Inf bucket's count. */
export function bucketTotal(b: Buckets): number {
  return b.get(Number.POSITIVE_INFINITY) ?? 0;
}

/**
 * The upper bound (in the histogram's unit) of the smallest bucket whose cumulative count reaches
 * q of the total: "at or under this". Null for an empty window; Infinity when the quantile lies
 * beyond the last finite bucket.
 */
export function bucketQuantile(b: Buckets, q: number): number | null {
  if (!(q > 0 && q <= 1)) throw new RangeError(`bucketQuantile: q must be in (0, 1], got ${q}`);
  const total = bucketTotal(b);
  if (total === 0) return null;
  const les = [...b.keys()].sort((x, y) => x - y);
  return les.find((le) => (b.get(le) ?? 0) >= q * total) ?? Number.POSITIVE_INFINITY;
}

/** An unlabelled gauge or counter's value in a text exposition, or undefined when absent. */
export function sampleOf(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}
