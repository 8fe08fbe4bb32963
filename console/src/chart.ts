// A small line chart drawn as SVG elements (never as markup): one series, scaled to its range.
const NS = "http://www.w3.org/2000/svg";

export function sparkline(values: number[], label: string): SVGSVGElement {
  const w = 300;
  const hgt = 60;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt + 14}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  const max = Math.max(...values, 1e-9);
  const min = Math.min(...values, 0);
  const pts = values.map((v, i) => {
    const x = values.length < 2 ? w : (i / (values.length - 1)) * w;
    const y = hgt - ((v - min) / (max - min || 1)) * (hgt - 4) + 2;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.join(" "));
  const text = document.createElementNS(NS, "text");
  text.setAttribute("x", "2");
  text.setAttribute("y", String(hgt + 12));
  text.setAttribute("font-size", "11");
  text.textContent = `${label}: ${values.at(-1) ?? "-"} (max ${max === 1e-9 ? 0 : max})`;
  svg.append(line, text);
  return svg;
}

/** Numeric fields of a JSON object, one level of nesting flattened ("memory.bytes"). */
export function numericFields(obj: unknown, prefix = ""): Record<string, number> {
  const out: Record<string, number> = {};
  if (!obj || typeof obj !== "object") return out;
  for (const [k, v] of Object.entries(obj as Record<string, unknown>)) {
    if (typeof v === "number" && Number.isFinite(v)) out[prefix + k] = v;
    else if (!prefix && v && typeof v === "object" && !Array.isArray(v)) Object.assign(out, numericFields(v, `${k}.`));
  }
  return out;
}
