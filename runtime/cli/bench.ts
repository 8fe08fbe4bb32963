// `sbx bench create`: create-accept latency measured from the caller's side, through the same
// Manager seam as every verb (the service over HTTP, or in-process). It prints numbers; it is
// a measurement, not a check (docs/benchmarks.md). The verb is over 60 lines on purpose: flags,
// the timed creates and the printed table, top to bottom as its output reads.
import { SbxError, ValidationError } from "../core/errors.ts";
import { intFlag, parse } from "./args.ts";
import { type Command, print, table } from "./command.ts";
import { summarize } from "./stats.ts";

export const bench: Command = async (ctx, argv) => {
  const usage = "sbx bench create [--count 100] [--concurrency 10] [--profile P] [--size S] [--keep] [--json]";
  const a = parse(
    argv,
    {
      count: { type: "string" },
      concurrency: { type: "string" },
      profile: { type: "string" },
      size: { type: "string" },
      keep: { type: "boolean" },
    },
    usage,
  );
  if (a.positionals[0] !== "create") throw new ValidationError("bench", a.positionals[0] ?? "", `usage: ${usage}`);
  const count = intFlag("--count", a.values.count, 1) ?? 100;
  const concurrency = intFlag("--concurrency", a.values.concurrency, 1) ?? 10;
  const samples: number[] = [];
  const errors: Record<string, number> = {};
  const ids: string[] = [];
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < count) {
      next++;
      const start = performance.now();
      try {
        const s = await ctx.manager.create({
          owner: ctx.owner,
          profile: a.values.profile as string,
          size: a.values.size as string,
        });
        samples.push(performance.now() - start);
        ids.push(s.id);
      } catch (err) {
        const code = err instanceof SbxError ? err.code : "internal";
        errors[code] = (errors[code] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  const wallMs = performance.now() - t0;
  if (!a.values.keep)
    await Promise.all(
      ids.map((id) =>
        ctx.manager
          .kill(ctx.owner, id)
          .catch((err) => ctx.io.stderr.write(`sbx: kill ${id}: ${(err as Error).message}\n`)),
      ),
    );
  const report = {
    op: "create-accept",
    concurrency,
    requested: count,
    ok: samples.length,
    errors,
    wallMs: Math.round(wallMs),
    ...summarize(samples),
  };
  const rows = [
    ["CONCURRENCY", "OK", "ERRORS", "P50 ms", "P90 ms", "P99 ms", "MAX ms"],
    [
      String(concurrency),
      String(report.ok),
      String(count - report.ok),
      String(report.p50Ms),
      String(report.p90Ms),
      String(report.p99Ms),
      String(report.maxMs),
    ],
  ];
  print(ctx, !!a.values.json, report, table(rows));
  return count === report.ok ? 0 : 1;
};
