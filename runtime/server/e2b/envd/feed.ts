// One reader's view of a process's output: a queue the process fills and a stream handler
// drains. Bounded: past HIGH_WATER_BYTES queued, the feed reports itself full and the process
// pauses its output (backpressure reaches the command through the pipe) until it drains to
// half of that. Full is a latch, set above the high mark and cleared at the low one: the
// resume must come from the read that crosses the low mark, whichever read that is, because
// while paused no new output arrives to prompt another look.
export type ProcessUpdate =
  | { kind: "data"; stream: "stdout" | "stderr"; data: Uint8Array }
  | { kind: "end"; end: ProcessEnd };

export interface ProcessEnd {
  exitCode: number;
  /** true when it ran to its own exit, false when a signal (our kill) ended it */
  exited: boolean;
  status: string;
  timedOut: boolean;
  error?: string;
}

/** Queued output above which a feed asks the process to pause; it resumes below half of it. */
export const HIGH_WATER_BYTES = 1024 * 1024;

/** What `next` resolves with when nothing happened for idleMs (time for a keepalive). */
export const IDLE = "idle" as const;

export class OutputFeed {
  private readonly queue: ProcessUpdate[] = [];
  private queuedBytes = 0;
  /** set once more than HIGH_WATER_BYTES were queued; cleared once the queue fell to half of it */
  private holding = false;
  private wake?: () => void;
  closed = false;

  /** @param onDrained called when a full feed falls below the low-water mark, or closes */
  constructor(private readonly onDrained: () => void) {}

  get full(): boolean {
    return this.holding;
  }

  push(u: ProcessUpdate): void {
    if (this.closed) return;
    this.queue.push(u);
    if (u.kind === "data") {
      this.queuedBytes += u.data.length;
      if (this.queuedBytes > HIGH_WATER_BYTES) this.holding = true;
    }
    this.wake?.();
  }

  /**
   * The next update; IDLE after idleMs without one; undefined once the signal aborted (the
   * client went away or its deadline passed) or the feed was closed.
   */
  async next(signal: AbortSignal, idleMs: number): Promise<ProcessUpdate | typeof IDLE | undefined> {
    if (this.queue.length === 0 && !this.closed && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", done);
          this.wake = undefined;
          resolve();
        };
        const timer = setTimeout(done, idleMs);
        signal.addEventListener("abort", done);
        this.wake = done;
      });
    }
    if (this.closed || signal.aborted) return undefined;
    const u = this.queue.shift();
    if (!u) return IDLE;
    if (u.kind === "data") {
      this.queuedBytes -= u.data.length;
      if (this.holding && this.queuedBytes <= HIGH_WATER_BYTES / 2) {
        this.holding = false;
        this.onDrained();
      }
    }
    return u;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.holding = false;
    this.wake?.();
    this.onDrained();
  }
}

/**
 * The feeds attached to one process, and the pause that backpressure asks of its output: a
 * process pauses its output while any feed is full and resumes once none is.
 */
export class FeedSet {
  private readonly feeds = new Set<OutputFeed>();
  private paused = false;

  /** @param pause called with true to pause the process's output, false to resume it */
  constructor(private readonly pause: (paused: boolean) => void) {}

  get size(): number {
    this.prune();
    return this.feeds.size;
  }

  /** a new feed: every update from now on */
  add(): OutputFeed {
    const feed = new OutputFeed(() => this.reconsider());
    this.feeds.add(feed);
    return feed;
  }

  data(stream: "stdout" | "stderr", data: Uint8Array): void {
    for (const f of this.feeds) {
      if (f.closed) this.feeds.delete(f);
      else f.push({ kind: "data", stream, data });
    }
    this.reconsider();
  }

  end(end: ProcessEnd): void {
    for (const f of this.feeds) f.push({ kind: "end", end });
    this.feeds.clear();
  }

  /** tells the process again (output streams it just started reading must start paused too) */
  reapply(): void {
    this.pause(this.paused);
  }

  private prune(): void {
    for (const f of this.feeds) if (f.closed) this.feeds.delete(f);
  }

  reconsider(): void {
    this.prune();
    const full = [...this.feeds].some((f) => f.full);
    if (full === this.paused) return;
    this.paused = full;
    this.pause(full);
  }
}
