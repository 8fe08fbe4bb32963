// The results report: data lines to figures (runs through their adapter, bad lines named), figures
// to chart specs, and specs to SVG with the right bars, labels and escaped text.
import { describe, expect, it } from "vitest";
import { type Figure, parseData } from "./figures.ts";
import { CHARTS, headlineTable, planChart, renderReport } from "./report.ts";
import { escapeXml, planScale, renderChart } from "./svg.ts";

const fig = (
  group: string,
  series: string,
  value: number,
  date = "2026-12-05",
  chart: Figure["chart"] = "e2b",
): Figure => ({
  type: "figure",
  chart,
  group,
  series,
  value,
  unit: "ms",
  date,
  command: "npx tsx bench/e2b-exec.ts --samples 300",
  load: "1.2",
  source: "docs/benchmarks.md",
});

const FIXTURE = [
  JSON.stringify(fig("local, 2026-12-01", "difference of p50s", 1.79, "2026-12-01")),
  JSON.stringify(fig("local, 2026-12-01", "paired median", 1.8, "2026-12-01")),
  JSON.stringify(fig("kubernetes, 2026-12-01", "paired median", 1.67, "2026-12-01")),
  JSON.stringify({
    type: "run",
    bench: "e2b-exec",
    date: "2026-12-05",
    command: "npx tsx bench/e2b-exec.ts --samples 100",
    result: {
      platform: "local",
      loadAvgAtStart: 13.17,
      loadAvgAtEnd: 12.56,
      e2bAddedP50Ms: 17.01,
      e2bAddedPairedMedianMs: 15.58,
    },
  }),
  "",
].join("\n");

const e2bChart = CHARTS.find((c) => c.id === "e2b")!;

describe("bench report", () => {
  it("reads figures and runs from JSONL, turning a run into its figures with date and load", () => {
    const figures = parseData("fixture.jsonl", FIXTURE);
    expect(figures).toHaveLength(5);
    expect(figures[4]).toMatchObject({
      chart: "e2b",
      group: "local, 2026-12-05",
      series: "paired median",
      value: 15.58,
      load: "13.2–12.6",
      source: "measured",
    });
  });

  it.each([
    ["not json", "fixture.jsonl:1: not JSON"],
    ['{"type":"trial"}', 'fixture.jsonl:1: type "trial"; expected "figure" or "run"'],
    [
      '{"type":"run","bench":"e2b-exec","date":"2026-12-05","command":"x","result":{"platform":"local"}}',
      "e2b-exec run of 2026-12-05: result.e2bAddedP50Ms is undefined; expected a number",
    ],
  ])("refuses %s, naming the line and the field", (line, message) => {
    expect(() => parseData("fixture.jsonl", line)).toThrow(message);
  });

  it("plans a chart's groups by date and fills a series' gaps with null", () => {
    const spec = planChart(e2bChart, parseData("fixture.jsonl", FIXTURE));
    expect(spec.groups).toEqual(["local, 2026-12-01", "kubernetes, 2026-12-01", "local, 2026-12-05"]);
    expect(spec.series).toEqual([
      { name: "difference of p50s", values: [1.79, null, 17.01] },
      { name: "paired median", values: [1.8, 1.67, 15.58] },
    ]);
  });

  it("draws one bar and one value label per measured value, and one label per group", () => {
    const svg = renderChart(planChart(e2bChart, parseData("fixture.jsonl", FIXTURE)));
    expect(svg.match(/<rect class="bar"/g)).toHaveLength(5);
    expect(svg.match(/<text [^>]*class="value"/g)).toHaveLength(5);
    expect(svg.match(/<text class="group"/g)).toHaveLength(3);
    expect(svg.match(/<rect class="key"/g)).toHaveLength(2);
    for (const v of ["1.79", "1.8", "1.67", "17", "15.6"]) expect(svg).toContain(`>${v}</text>`);
    expect(svg).toContain("target ≤ 2 ms at p50");
  });

  it("draws a line chart's points, one polyline per series", () => {
    const svg = renderChart({
      kind: "line",
      title: "t",
      unit: "ms",
      groups: ["1", "10", "50"],
      series: [{ name: "p50", values: [1, null, 3] }],
    });
    expect(svg.match(/<polyline/g)).toHaveLength(1);
    expect(svg.match(/<circle class="point"/g)).toHaveLength(2);
  });

  it("escapes every text taken from the data: titles, groups, series and tooltips", () => {
    const hostile = `<script>alert("x")</script>&'`;
    const svg = renderChart({
      kind: "bar",
      title: hostile,
      unit: hostile,
      groups: [hostile],
      series: [{ name: hostile, values: [1] }],
    });
    expect(svg).not.toContain("<script>");
    expect(svg).not.toMatch(/"x"\)/);
    expect(svg).toContain(escapeXml(hostile));
    expect(escapeXml(hostile)).toBe("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&apos;");
  });

  it("puts values on a log scale a decade below the smallest, so no bar has no height", () => {
    const ys = planScale([1, 595], "log");
    expect(ys.ticks).toEqual([0.1, 1, 10, 100, 1000]);
    expect(ys.at(1)).toBeGreaterThan(0);
    expect(ys.at(1000)).toBeCloseTo(1);
    expect(planScale([0, 17], "linear").ticks).toEqual([0, 5, 10, 15, 20]);
  });

  it("renders the headline table with each figure's date and load, and 'not run' where nothing was measured", () => {
    const figures = parseData("fixture.jsonl", FIXTURE);
    const table = headlineTable(
      [
        {
          what: "E2B | layer",
          target: "≤ 2 ms",
          today: ["e2b", "local, 2026-12-05", "paired median"],
          recorded: ["e2b", "local, 2026-12-01", "paired median"],
          anchors: "",
        },
        { what: "claim", target: "≤ 20 ms", anchors: "agent-sandbox 92 ms" },
      ],
      figures,
    );
    expect(table.split("\n")).toEqual([
      "| what | target | measured on the report's day | best recorded | anchors' published numbers |",
      "| --- | --- | --- | --- | --- |",
      "| E2B \\| layer | ≤ 2 ms | 15.6 ms (2026-12-05, load 13.2–12.6) | 1.8 ms (2026-12-01, load 1.2) |  |",
      "| claim | ≤ 20 ms | not run | not run | agent-sandbox 92 ms |",
    ]);
  });

  it("writes one SVG per chart and links each, with the commands that reproduce it", () => {
    const { markdown, svgs } = renderReport(parseData("fixture.jsonl", FIXTURE), [], "# Results");
    expect([...svgs.keys()]).toEqual(CHARTS.map((c) => `${c.id}.svg`));
    for (const c of CHARTS) expect(markdown).toContain(`(results/${c.id}.svg)`);
    expect(markdown).toContain(
      "- `npx tsx bench/e2b-exec.ts --samples 300` — 2026-12-01, load 1.2 (docs/benchmarks.md)",
    );
    expect(markdown).toContain("- `npx tsx bench/e2b-exec.ts --samples 100` — 2026-12-05, load 13.2–12.6 (measured)");
  });
});
