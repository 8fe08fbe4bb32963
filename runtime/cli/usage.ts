// `sbx usage`: the caller's team (every team for tenancy.admins) as GET /v1/usage reports it:
// live sandboxes, CPU and memory against the limits, paused sandboxes, and the creates rate.
import { SbxError } from "../core/errors.ts";
import { formatCpu, formatMemory } from "../core/quantity.ts";
import type { TeamUsageReport, UsageReport } from "../core/usage.ts";
import { parse } from "./args.ts";
import { type Command, print, table } from "./command.ts";

/** The Manager's usage, sync in-process (SandboxManager) or over HTTP (HttpManager). */
interface UsageSource {
  usage?(owner: string): UsageReport | Promise<UsageReport>;
}

const of = (used: string, limit: string | undefined) => (limit === undefined ? used : `${used}/${limit}`);

function row(t: TeamUsageReport): string[] {
  const l = t.limits;
  const rate = t.creates
    ? `${t.creates.perMinute}/min${t.creates.tokensHere === undefined ? "" : ` (${t.creates.tokensHere} left here)`}`
    : "-";
  const rejected = Object.entries(t.rejectedHere)
    .map(([k, n]) => `${k}=${n}`)
    .join(",");
  return [
    t.team,
    of(String(t.live.sandboxes), l.sandboxes === undefined ? undefined : String(l.sandboxes)),
    of(formatCpu(t.live.cpuMillis), l.cpuMillis === undefined ? undefined : formatCpu(l.cpuMillis)),
    of(formatMemory(t.live.memoryBytes), l.memoryBytes === undefined ? undefined : formatMemory(l.memoryBytes)),
    of(String(t.paused.sandboxes), l.pausedSandboxes === undefined ? undefined : String(l.pausedSandboxes)),
    t.guarantee ? `${formatCpu(t.guarantee.cpuMillis)}, ${formatMemory(t.guarantee.memoryBytes)}` : "-",
    rate,
    rejected || "-",
  ];
}

export const usage: Command = async (ctx, argv) => {
  const a = parse(argv, {}, "sbx usage [--json]");
  const m = ctx.manager as UsageSource;
  if (!m.usage) throw new SbxError("conflict", "this service does not report usage; upgrade it");
  const r = await m.usage(ctx.owner);
  const rows = [
    ["TEAM", "LIVE", "CPU", "MEMORY", "PAUSED", "GUARANTEE", "CREATES", "REFUSED HERE"],
    ...r.teams.map(row),
  ];
  print(ctx, !!a.values.json, r, `${table(rows)}\n(used/limit; no limit where only the use is shown)`);
  return 0;
};
