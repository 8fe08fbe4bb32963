// docs/results.md and its charts, from figures (figures.ts): a one-screen table of the headline
// figures against their targets and the anchors' published numbers, then one chart per topic,
// each with the commands and dates of the figures it draws. Pure: figures in, files' text out.
import type { ChartId, Figure } from "./figures.ts";
import { type ChartSpec, formatValue, renderChart } from "./svg.ts";

interface ChartDef {
  id: Exclude<ChartId, "headline">;
  heading: string;
  spec: Omit<ChartSpec, "groups" | "series">;
  /** what the chart shows and how to read it */
  note: string;
}

export const CHARTS: ChartDef[] = [
  {
    id: "create-accept",
    heading: "Create-accept (Kubernetes backend, by concurrent clients)",
    spec: {
      kind: "line",
      title: "Create-accept latency by concurrent clients",
      unit: "ms",
      reference: { value: 25, label: "target p99 ≤ 25 ms at 50 clients" },
    },
    note: "Server-side `Manager.create` on the test control plane; clients loop create → wait → exec → kill.",
  },
  {
    id: "warm-claim",
    heading: "Warm claim (40 concurrent claimers)",
    spec: {
      kind: "bar",
      title: "Warm claim latency, 40 claimers",
      unit: "ms",
      scale: "log",
      reference: { value: 100, label: "target p99 ≤ 100 ms" },
    },
    note: "Server-side claim. The 3-replica rows are histogram buckets (≤ 250 ms, ≤ 1 ms: all the resolution there is); after the claim became an in-memory decision the client's p50 is the 2-core machine's HTTP queueing (318 ms). agent-sandbox's figure is its own, on a real cluster.",
  },
  {
    id: "exec",
    heading: "Exec round trip",
    spec: { kind: "bar", title: "Exec round trip of `true`, p50", unit: "ms", scale: "log" },
    note: "`true` in a ready sandbox against its bare baseline in the same run (a host spawn locally; a bare client-node Exec on Kubernetes). E2B's figure is its own, at 750 sandboxes.",
  },
  {
    id: "resume",
    heading: "Resume (local, empty workspace), how it moved",
    spec: {
      kind: "line",
      title: "Resume call → command output, by revision",
      unit: "ms",
      reference: { value: 250, label: "target p50 ≤ 250 ms" },
    },
    note: "`command_ms`: resume call to a foreground `cat` printing the exact marker. The load average moves it more than any revision: see each point's load below.",
  },
  {
    id: "resume-vs-registry",
    heading: "Pause and resume against the raw registry (1 GiB)",
    spec: { kind: "bar", title: "1 GiB pause and resume against raw registry push and pull", unit: "MB/s" },
    note: "Raw push (pull) is measured right before each trial's pause (resume), same registry and payload size. Target: each ≥ 80% of the raw figure.",
  },
  {
    id: "ports",
    heading: "Port relay",
    spec: {
      kind: "bar",
      title: "First byte of GET /echo on a fresh connection, p50",
      unit: "ms",
      scale: "log",
      reference: { value: 2, label: "target: relay adds ≤ 2 ms" },
    },
    note: "The same Python fixture server, direct on the host's loopback and through the service's path form, interleaved in one run.",
  },
  {
    id: "e2b",
    heading: "E2B layer overhead",
    spec: {
      kind: "bar",
      title: "What the E2B layer adds to `commands.run('true')`",
      unit: "ms",
      reference: { value: 2, label: "target ≤ 2 ms at p50" },
    },
    note: "The real E2B SDK against our own API's exec of the same command line, on the same sandbox, interleaved round by round.",
  },
];

const uniq = <T>(xs: T[]) => [...new Set(xs)];
/** dated figures in date order, undated (published anchors) last; stable within a date */
const byDate = (a: Figure, b: Figure) => (a.date || "9999").localeCompare(b.date || "9999");

/** A chart's spec from the figures that name it: groups and series in order of first appearance by date. */
export function planChart(def: ChartDef, figures: Figure[]): ChartSpec {
  const mine = figures.filter((f) => f.chart === def.id).sort(byDate);
  const groups = uniq(mine.map((f) => f.group));
  const series = uniq(mine.map((f) => f.series)).map((name) => ({
    name,
    values: groups.map((g) => mine.find((f) => f.group === g && f.series === name)?.value ?? null),
  }));
  return { ...def.spec, groups, series };
}

export type FigureKey = [ChartId, string, string, string?];

export interface Headline {
  what: string;
  target: string;
  /** figure keys [chart, group, series, date?]: measured today, and best recorded */
  today?: FigureKey;
  recorded?: FigureKey;
  anchors: string;
}

function cell(figures: Figure[], key: FigureKey | undefined): string {
  if (!key) return "not run";
  const [chart, group, series, date] = key;
  const f = figures.find(
    (x) => x.chart === chart && x.group === group && x.series === series && (date === undefined || x.date === date),
  );
  if (!f) return "–";
  const when = [f.date, f.load ? `load ${f.load}` : ""].filter(Boolean).join(", ");
  return `${formatValue(f.value)} ${f.unit}${when ? ` (${when})` : ""}`;
}

const row = (cells: string[]) => `| ${cells.map((c) => c.replace(/\|/g, "\\|")).join(" | ")} |`;

export function headlineTable(headlines: Headline[], figures: Figure[]): string {
  return [
    row(["what", "target", "measured on the report's day", "best recorded", "anchors' published numbers"]),
    row(["---", "---", "---", "---", "---"]),
    ...headlines.map((h) => row([h.what, h.target, cell(figures, h.today), cell(figures, h.recorded), h.anchors])),
  ].join("\n");
}

/** The commands that produced a chart's figures, each with its dates and loads. */
export function provenance(id: ChartId, figures: Figure[]): string[] {
  const mine = figures.filter((f) => f.chart === id).sort(byDate);
  return uniq(mine.map((f) => f.command)).map((command) => {
    const fs = mine.filter((f) => f.command === command);
    const dates = uniq(fs.map((f) => [f.date || "undated", f.load ? `load ${f.load}` : ""].filter(Boolean).join(", ")));
    const from = uniq(fs.map((f) => f.source)).join(", ");
    return `- \`${command}\` — ${dates.join("; ")} (${from})`;
  });
}

export interface ReportFiles {
  markdown: string;
  /** file name (under docs/results/) → SVG */
  svgs: Map<string, string>;
}

export function renderReport(figures: Figure[], headlines: Headline[], intro: string): ReportFiles {
  const svgs = new Map<string, string>();
  const sections = CHARTS.map((def) => {
    const name = `${def.id}.svg`;
    svgs.set(name, renderChart(planChart(def, figures)));
    return [
      `## ${def.heading}`,
      "",
      `![${def.spec.title}](results/${name})`,
      "",
      def.note,
      "",
      "Reproduce:",
      "",
      ...provenance(def.id, figures),
      "",
    ].join("\n");
  });
  const markdown = [intro, "", headlineTable(headlines, figures), "", ...sections].join("\n");
  return { markdown, svgs };
}
