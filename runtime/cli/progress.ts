// Progress of `sbx pause` / `sbx resume` on stderr: bytes moved, MB/s, and a percentage when
// the sizes are known (resume). On a terminal one line is redrawn in place; elsewhere (with
// --progress) a plain line is written at most once per interval, so logs stay readable.
// The pure part (summarizeTransfer, formatTransfer) is tested alone; the clock is injected.
import type { Writable } from "node:stream";
import type { TransferProgress } from "../core/types.ts";

export interface TransferSummary {
  bytes: number;
  /** sum of the known sizes, when every path reported one */
  totalBytes?: number;
  /** whole percent, when totalBytes is known */
  percent?: number;
  /** average since the start, in MB/s (10^6 bytes) */
  mbPerSecond: number;
}

/** Totals over the latest report of every path. */
export function summarizeTransfer(latest: Iterable<TransferProgress>, elapsedMs: number): TransferSummary {
  let bytes = 0;
  let total = 0;
  let allKnown = true;
  let any = false;
  for (const p of latest) {
    any = true;
    bytes += p.bytes;
    if (p.totalBytes === undefined) allKnown = false;
    else total += p.totalBytes;
  }
  const mbPerSecond = elapsedMs > 0 ? bytes / 1e6 / (elapsedMs / 1000) : 0;
  if (!any || !allKnown) return { bytes, mbPerSecond };
  const percent = total === 0 ? 100 : Math.min(100, Math.floor((bytes / total) * 100));
  return { bytes, totalBytes: total, percent, mbPerSecond };
}

/** 1234567 -> "1.2 MB" (decimal units, as MB/s is). */
export function formatBytes(n: number): string {
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let v = n;
  let i = -1;
  do {
    v /= 1000;
    i++;
  } while (v >= 1000 && i < units.length - 1);
  return `${v.toFixed(1)} ${units[i]}`;
}

/** "pausing sbx-1: 12.0 MB of 40.0 MB (30%), 6.0 MB/s" */
export function formatTransfer(verb: "pause" | "resume", id: string, s: TransferSummary): string {
  const ing = verb === "pause" ? "pausing" : "resuming";
  const moved =
    s.totalBytes === undefined
      ? formatBytes(s.bytes)
      : `${formatBytes(s.bytes)} of ${formatBytes(s.totalBytes)} (${s.percent}%)`;
  return `${ing} ${id}: ${moved}, ${s.mbPerSecond.toFixed(1)} MB/s`;
}

/** "paused sbx-1: 40.0 MB in 6.7 s (6.0 MB/s)" */
export function formatTransferDone(
  verb: "pause" | "resume",
  id: string,
  s: TransferSummary,
  elapsedMs: number,
): string {
  return `${verb === "pause" ? "paused" : "resumed"} ${id}: ${formatBytes(s.bytes)} in ${(elapsedMs / 1000).toFixed(1)} s (${s.mbPerSecond.toFixed(1)} MB/s)`;
}

export interface ProgressDisplayOptions {
  verb: "pause" | "resume";
  id: string;
  out: Writable;
  /** redraw one line in place (a terminal) instead of writing lines */
  tty: boolean;
  now?: () => number;
  /** default: 100 ms on a terminal, 1 s otherwise */
  intervalMs?: number;
}

export class ProgressDisplay {
  private readonly latest = new Map<string, TransferProgress>();
  private readonly now: () => number;
  private readonly intervalMs: number;
  private readonly started: number;
  private lastDraw = Number.NEGATIVE_INFINITY;
  private drawn = false;

  constructor(private readonly o: ProgressDisplayOptions) {
    this.now = o.now ?? Date.now;
    this.intervalMs = o.intervalMs ?? (o.tty ? 100 : 1000);
    this.started = this.now();
  }

  readonly onProgress = (p: TransferProgress): void => {
    this.latest.set(p.path, p);
    const t = this.now();
    if (t - this.lastDraw < this.intervalMs) return;
    this.lastDraw = t;
    const line = formatTransfer(this.o.verb, this.o.id, summarizeTransfer(this.latest.values(), t - this.started));
    this.o.out.write(this.o.tty ? `\r\x1b[K${line}` : `${line}\n`);
    this.drawn = true;
  };

  /** The summary line when bytes moved (nothing for a no-op resume of a running sandbox). */
  done(): void {
    this.clear();
    if (this.latest.size === 0) return;
    const elapsed = this.now() - this.started;
    this.o.out.write(
      `${formatTransferDone(this.o.verb, this.o.id, summarizeTransfer(this.latest.values(), elapsed), elapsed)}\n`,
    );
  }

  /** On failure: leave a clean line for the error message. */
  clear(): void {
    if (this.o.tty && this.drawn) this.o.out.write("\r\x1b[K");
    this.drawn = false;
  }
}
