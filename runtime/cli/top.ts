// `sbx stats ID` (one sandbox's resource figures: its newest sample against its limits, its
// warnings, and with --history every sample kept) and `sbx top` (each of the caller's sandboxes,
// redrawn in place every --interval on a terminal until Ctrl-C or q, printed once otherwise).
// The figures come from the service's sampler (GET /v1/sandboxes/:id/metrics, GET /v1/resources).
import { SbxError } from "../core/errors.ts";
import type { ResourceLimits, ResourceSample, SandboxResourceLine, SandboxResources } from "../core/types.ts";
import { durationFlag, need, parse } from "./args.ts";
import { type Command, type CommandContext, print, table } from "./command.ts";

const MiB = 1024 * 1024;

export function formatBytes(n: number | undefined): string {
  if (n === undefined) return "-";
  if (n >= 1024 * MiB) return `${(n / (1024 * MiB)).toFixed(2)}GiB`;
  return `${(n / MiB).toFixed(1)}MiB`;
}

const pct = (used: number | undefined, limit: number) =>
  used === undefined || limit <= 0 ? "" : ` (${Math.round((used * 100) / limit)}%)`;

/** The four figures of a sample against the limits, as table cells. */
export function resourceCells(s: ResourceSample | undefined, l: ResourceLimits): string[] {
  const mem = s?.memoryWorkingSetBytes ?? s?.memoryBytes;
  return [
    s?.cpuCores === undefined ? "-" : `${s.cpuCores.toFixed(2)}/${l.cpuCores} (${Math.round(s.cpuPct ?? 0)}%)`,
    s ? `${formatBytes(mem)}/${formatBytes(l.memoryBytes)}${pct(mem, l.memoryBytes)}` : "-",
    s?.pids === undefined ? "-" : `${s.pids}/${l.pids}`,
    s ? `${formatBytes(s.workspaceUsedBytes)}/${formatBytes(l.workspaceBytes)}` : "-",
  ];
}

const HEAD = ["CPU (cores)", "MEMORY", "PIDS", "WORKSPACE"];

export function statsHuman(r: SandboxResources, history: boolean): string {
  const latest = r.samples.at(-1);
  const lines = [
    table([
      ["ID", ...HEAD],
      [r.id, ...resourceCells(latest, r.limits)],
    ]),
  ];
  if (!latest) lines.push(`(no sample yet: sampled every ${r.intervalMs / 1000}s while it runs)`);
  else lines.push(`sampled ${latest.at}, every ${r.intervalMs / 1000}s; memory is the working set`);
  for (const e of r.events) lines.push(`${e.at}  ${e.type}: ${e.message}`);
  if (history && r.samples.length)
    lines.push("", table([["TIME", ...HEAD], ...r.samples.map((s) => [s.at, ...resourceCells(s, r.limits)])]));
  return lines.join("\n");
}

export function topHuman(lines: SandboxResourceLine[]): string {
  if (lines.length === 0) return "no sandboxes";
  return table([["ID", "PHASE", ...HEAD], ...lines.map((l) => [l.id, l.phase, ...resourceCells(l.latest, l.limits)])]);
}

interface ResourceSource {
  resources?: NonNullable<CommandContext["manager"]["resources"]>;
  resourceLines?: NonNullable<CommandContext["manager"]["resourceLines"]>;
}

function source(ctx: CommandContext): Required<ResourceSource> {
  const m = ctx.manager as ResourceSource;
  if (!m.resources || !m.resourceLines)
    throw new SbxError("conflict", "this service does not sample sandbox resources; upgrade it");
  return m as Required<ResourceSource>;
}

export const stats: Command = async (ctx, argv) => {
  const usage = "sbx stats ID [--since 10m] [--history] [--json]";
  const a = parse(argv, { since: { type: "string" }, history: { type: "boolean" } }, usage);
  need(a.positionals, 1, usage);
  const since = durationFlag("--since", a.values.since);
  const range = since === undefined ? {} : { startMs: Date.now() - since * 1000 };
  const r = await source(ctx).resources(ctx.owner, a.positionals[0], range);
  print(ctx, !!a.values.json, r, statsHuman(r, !!a.values.history));
  return 0;
};

export const top: Command = async (ctx, argv) => {
  const usage = "sbx top [--interval 2s] [--once] [--json]";
  const a = parse(argv, { interval: { type: "string" }, once: { type: "boolean" } }, usage);
  const src = source(ctx);
  const out = ctx.io.stdout as NodeJS.WriteStream;
  const once = !!a.values.once || !!a.values.json || !out.isTTY;
  if (once) {
    const lines = await src.resourceLines(ctx.owner);
    print(ctx, !!a.values.json, { sandboxes: lines }, topHuman(lines));
    return 0;
  }
  const everyMs = (durationFlag("--interval", a.values.interval) ?? 2) * 1000;
  return redrawUntilQuit(ctx, everyMs, async () => topHuman(await src.resourceLines(ctx.owner)));
};

/** Redraws `render()` at the top of the terminal every `everyMs` until Ctrl-C or q; the screen is left as drawn. */
async function redrawUntilQuit(ctx: CommandContext, everyMs: number, render: () => Promise<string>): Promise<number> {
  const out = ctx.io.stdout;
  const stdin = ctx.io.stdin as NodeJS.ReadStream;
  let quit!: () => void;
  const quitting = new Promise<void>((r) => {
    quit = r;
  });
  const onKey = (b: Buffer) => {
    if (b.includes(0x03) || b.includes(0x71)) quit(); // Ctrl-C in raw mode, or q
  };
  const raw = !!stdin.isTTY && typeof stdin.setRawMode === "function";
  if (raw) stdin.setRawMode(true);
  stdin.on("data", onKey);
  process.once("SIGINT", quit);
  out.write("\x1b[?25l"); // hide the cursor while redrawing
  try {
    for (;;) {
      const text = await render();
      out.write(`\x1b[H\x1b[2J${text}\n(every ${everyMs / 1000}s; q or Ctrl-C quits)\n`);
      let timer: NodeJS.Timeout | undefined;
      const next = new Promise<"tick">((r) => {
        timer = setTimeout(() => r("tick"), everyMs);
      });
      const why = await Promise.race([next, quitting.then(() => "quit" as const)]);
      clearTimeout(timer);
      if (why === "quit") return 0;
    }
  } finally {
    out.write("\x1b[?25h");
    stdin.off("data", onKey);
    stdin.pause();
    if (raw) stdin.setRawMode(false);
    process.off("SIGINT", quit);
  }
}
