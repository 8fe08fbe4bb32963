// Reading the service's Prometheus text format in tests.

/** A value of a Prometheus text-format series, e.g. `sbx_budget_free{resource="cpu_millis"}`. */
export function metricValue(text: string, series: string): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

/** sbx_snapshot_layers_total by op and path; a series not yet written counts 0. */
export function layerCounts(text: string): Record<"podPush" | "replicaPush" | "podRestore" | "replicaRestore", number> {
  const v = (op: string, path: string) =>
    metricValue(text, `sbx_snapshot_layers_total{op="${op}",path="${path}"}`) ?? 0;
  return {
    podPush: v("push", "pod"),
    replicaPush: v("push", "replica"),
    podRestore: v("restore", "pod"),
    replicaRestore: v("restore", "replica"),
  };
}
