// npm run bench:report: reads bench/report/data/*.jsonl (figures transcribed from
// docs/benchmarks.md, and benchmark runs as they printed), writes docs/results.md and its SVG
// charts under docs/results/. To add a run, wrap its JSON output as a "run" record
// (bench/report/figures.ts) in a data file named after its date, then rerun this.
//   npx tsx bench/report/main.ts [--data bench/report/data] [--out docs]
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { parseData } from "./figures.ts";
import { HEADLINES, INTRO } from "./headlines.ts";
import { renderReport } from "./report.ts";

const root = resolve(import.meta.dirname, "../..");
const { values } = parseArgs({
  options: {
    data: { type: "string", default: join(root, "bench/report/data") },
    out: { type: "string", default: join(root, "docs") },
  },
});
const dataDir = values.data as string;
const outDir = values.out as string;

const files = readdirSync(dataDir)
  .filter((f) => f.endsWith(".jsonl"))
  .sort();
if (!files.length)
  throw new Error(`--data ${dataDir}: no .jsonl files; the report draws from bench/report/data/*.jsonl`);
const figures = files.flatMap((f) => parseData(f, readFileSync(join(dataDir, f), "utf8")));
const { markdown, svgs } = renderReport(figures, HEADLINES, INTRO);
mkdirSync(join(outDir, "results"), { recursive: true });
for (const [name, svg] of svgs) writeFileSync(join(outDir, "results", name), svg);
writeFileSync(join(outDir, "results.md"), markdown);
console.log(
  `${figures.length} figures from ${files.join(", ")} -> ${join(outDir, "results.md")} and ${svgs.size} charts`,
);
