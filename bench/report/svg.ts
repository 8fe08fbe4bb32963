// A small SVG chart renderer for docs/results.md: grouped bars and lines, drawn at build time
// (npm run bench:report). Our own ~150 lines instead of Vega-Lite or Observable Plot, which would
// bring a DOM (jsdom) or a headless browser into the build to draw a dozen static charts.
// Pure: a chart spec in, an SVG string out. Every text is XML-escaped, so a label taken from a
// result file can never become markup.

export interface Series {
  name: string;
  /** one value per group (bar chart) or per x (line chart); null = not measured */
  values: (number | null)[];
}

export interface ChartSpec {
  kind: "bar" | "line";
  title: string;
  /** the y axis' unit, e.g. "ms" */
  unit: string;
  /** the x categories: bar groups, or the points of a line */
  groups: string[];
  series: Series[];
  /** a dashed horizontal line, e.g. a target */
  reference?: { value: number; label: string };
  /** "log" when the values span orders of magnitude (1 ms next to 600 ms); default linear */
  scale?: "linear" | "log";
}

/** Where values sit on the plot: a fraction 0..1 of its height, and the ticks to label. */
export interface YScale {
  at(v: number): number;
  ticks: number[];
}

export function planScale(values: number[], scale: "linear" | "log" = "linear"): YScale {
  const max = Math.max(0, ...values);
  if (scale === "log") {
    const positive = values.filter((v) => v > 0);
    // a decade below the smallest value, so that no bar is drawn with no height
    const lo = 10 ** Math.floor(Math.log10(Math.min(...positive, max || 1) * 0.99));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(max * 1.1, lo * 10)));
    const span = Math.log10(hi / lo);
    const ticks: number[] = [];
    for (let t = lo; t <= hi * 1.001; t *= 10) ticks.push(t);
    return { at: (v) => Math.min(1, Math.max(0, Math.log10(Math.max(v, lo) / lo) / span)), ticks };
  }
  const top = niceMax(max * 1.1);
  return { at: (v) => v / top, ticks: [0, 1, 2, 3, 4].map((i) => (top * i) / 4) };
}

const W = 720;
const H = 300;
const M = { top: 40, right: 20, bottom: 70, left: 64 };
const COLORS = ["#2f5fd0", "#e07b39", "#3a9d5d", "#8e5bd0", "#c0392b", "#6b7280"];

export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&${{ "&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos" }[c]};`);
}

/** A round axis maximum above `max`: 1, 2 or 5 times a power of ten. */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

/** A value as a chart label: 3 significant figures, no trailing zeros. */
export function formatValue(v: number): string {
  if (v === 0) return "0";
  const abs = Math.abs(v);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3;
  return String(Number(v.toFixed(digits)));
}

function text(x: number, y: number, s: string, attrs = ""): string {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${attrs ? ` ${attrs}` : ""}>${escapeXml(s)}</text>`;
}

const PLOT_H = H - M.top - M.bottom;
const PLOT_W = W - M.left - M.right;

/** A category label under the axis, broken at ", " onto lines of its own. */
function groupLabel(x: number, g: string): string {
  const parts = g.split(", ");
  const spans = parts.map((p, i) => `<tspan x="${x.toFixed(1)}" dy="${i ? 13 : 0}">${escapeXml(p)}</tspan>`);
  return `<text class="group" text-anchor="middle" y="${H - M.bottom + 16}">${spans.join("")}</text>`;
}

function frame(spec: ChartSpec, ys: YScale): string[] {
  const out = [text(W / 2, 22, spec.title, 'class="title" text-anchor="middle"')];
  for (const v of ys.ticks) {
    const y = M.top + PLOT_H * (1 - ys.at(v));
    out.push(`<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`);
    out.push(text(M.left - 6, y + 4, formatValue(v), 'class="tick" text-anchor="end"'));
  }
  const unit = spec.scale === "log" ? `${spec.unit} (log scale)` : spec.unit;
  out.push(
    text(
      14,
      M.top + PLOT_H / 2,
      unit,
      `class="unit" text-anchor="middle" transform="rotate(-90 14 ${M.top + PLOT_H / 2})"`,
    ),
  );
  spec.series.forEach((s, i) => {
    const x = M.left + i * 150;
    out.push(`<rect class="key" x="${x}" y="${H - 18}" width="10" height="10" fill="${COLORS[i % COLORS.length]}"/>`);
    out.push(text(x + 14, H - 9, s.name, 'class="legend"'));
  });
  if (spec.reference) {
    // the line across the plot, its label in the legend's row (on the plot it would hide bars)
    const y = M.top + PLOT_H * (1 - ys.at(spec.reference.value));
    out.push(`<line class="reference" x1="${M.left}" x2="${W - M.right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`);
    out.push(
      `<line class="reference" x1="${W - M.right - 230}" x2="${W - M.right - 210}" y1="${H - 13}" y2="${H - 13}"/>`,
    );
    out.push(text(W - M.right - 205, H - 9, spec.reference.label, 'class="reference-label"'));
  }
  return out;
}

function bars(spec: ChartSpec, ys: YScale): string[] {
  const groupW = PLOT_W / Math.max(1, spec.groups.length);
  const barW = (groupW * 0.8) / Math.max(1, spec.series.length);
  const out: string[] = [];
  spec.groups.forEach((g, gi) => {
    const x0 = M.left + gi * groupW + groupW * 0.1;
    out.push(groupLabel(x0 + groupW * 0.4, g));
    spec.series.forEach((s, si) => {
      const v = s.values[gi];
      if (v === null || v === undefined) return;
      const h = PLOT_H * ys.at(v);
      const x = x0 + si * barW;
      const y = M.top + PLOT_H - h;
      out.push(
        `<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${COLORS[si % COLORS.length]}"><title>${escapeXml(`${s.name}, ${g}: ${formatValue(v)} ${spec.unit}`)}</title></rect>`,
      );
      out.push(text(x + barW / 2 - 1, y - 3, formatValue(v), 'class="value" text-anchor="middle"'));
    });
  });
  return out;
}

function lines(spec: ChartSpec, ys: YScale): string[] {
  const inset = 30;
  const step = spec.groups.length > 1 ? (PLOT_W - 2 * inset) / (spec.groups.length - 1) : 0;
  const xAt = (i: number) => M.left + (spec.groups.length > 1 ? inset + i * step : PLOT_W / 2);
  const yAt = (v: number) => M.top + PLOT_H * (1 - ys.at(v));
  const out = spec.groups.map((g, i) => groupLabel(xAt(i), g));
  spec.series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length];
    const pts = s.values.flatMap((v, i) => (v === null || v === undefined ? [] : [[xAt(i), yAt(v), v] as const]));
    out.push(
      `<polyline class="line" fill="none" stroke="${color}" points="${pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ")}"/>`,
    );
    for (const [x, y, v] of pts) {
      out.push(`<circle class="point" cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="3" fill="${color}"/>`);
      out.push(text(x, y - 6, formatValue(v), 'class="value" text-anchor="middle"'));
    }
  });
  return out;
}

export function renderChart(spec: ChartSpec): string {
  const all = spec.series.flatMap((s) => s.values).filter((v): v is number => typeof v === "number");
  const ys = planScale(spec.reference ? [...all, spec.reference.value] : all, spec.scale);
  const body = [...frame(spec, ys), ...(spec.kind === "bar" ? bars(spec, ys) : lines(spec, ys))];
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${escapeXml(spec.title)}">`,
    "<style>text{font:11px sans-serif;fill:#1d2330}.title{font-size:14px;font-weight:600}.tick,.unit{fill:#6b7280}" +
      ".grid{stroke:#e3e6eb}.reference{stroke:#b42318;stroke-dasharray:5 4}.reference-label{fill:#b42318}.line{stroke-width:2}</style>",
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    ...body,
    "</svg>",
    "",
  ].join("\n");
}
