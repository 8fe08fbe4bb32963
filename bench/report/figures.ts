// What the report draws from: figures, one number each, with the chart it belongs to, its date,
// the machine's load and the command that reproduces it. A data file (bench/report/data/*.jsonl)
// holds either figures directly (numbers transcribed from docs/benchmarks.md, with their dates)
// or runs: a benchmark's own output wrapped with the command and date it was run with, turned
// into figures here by one adapter per benchmark.

/** "headline": a figure only the headline table shows */
export type ChartId =
  | "create-accept"
  | "warm-claim"
  | "exec"
  | "resume"
  | "resume-vs-registry"
  | "ports"
  | "e2b"
  | "headline";

export interface Figure {
  type: "figure";
  chart: ChartId;
  /** the x category (bar group, or a line's point) */
  group: string;
  series: string;
  value: number;
  unit: string;
  /** YYYY-MM-DD */
  date: string;
  command: string;
  /** load average while measured, as recorded ("8.0–12.1"), or "" */
  load?: string;
  /** where the figure comes from: "measured" (a run file) or the document it was transcribed from */
  source: string;
}

/** One benchmark run as it printed (`result`: its JSON document, or its summary record). */
export interface Run {
  type: "run";
  bench: "local" | "e2b-exec" | "ports" | "resume" | "pause-data";
  command: string;
  date: string;
  // biome-ignore lint/suspicious/noExplicitAny: a benchmark's own JSON, read field by field through need()
  result: Record<string, any>;
}

const loadOf = (a?: number, b?: number) =>
  [a, b]
    .filter((x): x is number => typeof x === "number")
    .map((x) => x.toFixed(1))
    .join("–");

/** The figures a run contributes to the charts. Throws, naming the field, on a result it cannot read. */
export function figuresOfRun(run: Run): Figure[] {
  const r = run.result;
  const base = { type: "figure" as const, date: run.date, command: run.command, source: "measured", unit: "ms" };
  const need = (v: unknown, field: string): number => {
    if (typeof v !== "number" || !Number.isFinite(v))
      throw new Error(`${run.bench} run of ${run.date}: result.${field} is ${JSON.stringify(v)}; expected a number`);
    return v;
  };
  switch (run.bench) {
    case "local": {
      const load = loadOf(r.machine?.loadAvgAtStart, r.machine?.loadAvgAtEnd);
      const group = `local, ${run.date}`;
      return [
        {
          ...base,
          load,
          chart: "exec",
          group,
          series: "sbx exec p50",
          value: need(r.execRoundTripMs?.p50, "execRoundTripMs.p50"),
        },
        {
          ...base,
          load,
          chart: "exec",
          group,
          series: "bare baseline p50",
          value: need(r.bareHostSpawnMs?.p50, "bareHostSpawnMs.p50"),
        },
        {
          ...base,
          load,
          chart: "headline",
          group: "local create → ready",
          series: "p50",
          value: need(r.createToReadyMs?.p50, "createToReadyMs.p50"),
        },
      ];
    }
    case "e2b-exec": {
      const load = loadOf(r.loadAvgAtStart, r.loadAvgAtEnd);
      const group = `${r.platform}, ${run.date}`;
      return [
        {
          ...base,
          load,
          chart: "e2b",
          group,
          series: "difference of p50s",
          value: need(r.e2bAddedP50Ms, "e2bAddedP50Ms"),
        },
        {
          ...base,
          load,
          chart: "e2b",
          group,
          series: "paired median",
          value: need(r.e2bAddedPairedMedianMs, "e2bAddedPairedMedianMs"),
        },
      ];
    }
    case "ports": {
      const load = loadOf(r.environment?.load_average_1m);
      const relay = (r.relays ?? [])[0] ?? {};
      const series = `p50, ${run.date}`;
      return [
        {
          ...base,
          load,
          chart: "ports",
          group: "direct loopback",
          series,
          value: need(r.direct_first_byte_ms?.p50, "direct_first_byte_ms.p50"),
        },
        {
          ...base,
          load,
          chart: "ports",
          group: "through the relay",
          series,
          value: need(relay.first_byte_ms?.p50, "relays[0].first_byte_ms.p50"),
        },
        {
          ...base,
          load,
          chart: "ports",
          group: "added by the relay",
          series,
          value: need(relay.added_p50_ms, "relays[0].added_p50_ms"),
        },
        {
          ...base,
          load,
          chart: "headline",
          group: "wake (paused)",
          series,
          value: need(relay.wake_first_byte_ms?.p50, "relays[0].wake_first_byte_ms.p50"),
        },
      ];
    }
    case "resume": {
      const load = loadOf(r.load_average_1m);
      return [
        {
          ...base,
          load,
          chart: "resume",
          group: run.date,
          series: "command_ms p50",
          value: need(r.metrics?.command_ms?.p50, "metrics.command_ms.p50"),
        },
        {
          ...base,
          load,
          chart: "resume",
          group: run.date,
          series: "command_ms p95",
          value: need(r.metrics?.command_ms?.p95, "metrics.command_ms.p95"),
        },
      ];
    }
    case "pause-data": {
      // one trial record of bench/pause-data.ts, with the environment record's load_average_1m
      const load = loadOf(r.load_average_1m);
      const t = r.timings ?? {};
      const group = `${r.variant}, ${run.date}`;
      const mb = { ...base, load, chart: "resume-vs-registry" as const, group, unit: "MB/s" };
      return [
        { ...mb, series: "pause", value: need(t.pause_MBps, "timings.pause_MBps") },
        { ...mb, series: "raw push", value: need(t.raw_push_MBps, "timings.raw_push_MBps") },
        { ...mb, series: "resume", value: need(t.resume_MBps, "timings.resume_MBps") },
        { ...mb, series: "raw pull", value: need(t.raw_pull_MBps, "timings.raw_pull_MBps") },
      ];
    }
  }
}

/** Every figure in the data files' lines (figures as they are, runs through their adapter). */
export function parseData(name: string, text: string): Figure[] {
  const out: Figure[] = [];
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    let rec: Figure | Run;
    try {
      rec = JSON.parse(line);
    } catch (e) {
      throw new Error(`${name}:${i + 1}: not JSON (${(e as Error).message}); each line is one figure or run record`);
    }
    if (rec.type === "figure") out.push(rec);
    else if (rec.type === "run") out.push(...figuresOfRun(rec));
    else
      throw new Error(
        `${name}:${i + 1}: type ${JSON.stringify((rec as { type?: unknown }).type)}; expected "figure" or "run"`,
      );
  });
  return out;
}
