// A keyed work queue for level-triggered reconcilers: a key waits at most once (adds while
// it waits are deduplicated), one key is never processed twice at once (an add while it is
// processed re-queues it after), failures back off exponentially per key, and delayed adds
// run on the injected clock so tests drive time instead of sleeping.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";

export interface WorkQueueOptions {
  clock: Clock;
  logger: Logger;
  concurrency: number;
  baseBackoffMs?: number;
  maxBackoffMs?: number;
}

/** what a reconcile asks for next: nothing, or another look after some time */
// biome-ignore lint/suspicious/noConfusingVoidType: void (not undefined) lets any async function that returns nothing be a ReconcileFn
export type ReconcileResult = void | { requeueAfterMs: number };

export type ReconcileFn = (key: string) => Promise<ReconcileResult>;

/** Per-key exponential backoff: base * 2^(failures-1), capped. Pure. */
export function backoffDelay(failures: number, baseMs: number, maxMs: number): number {
  if (failures <= 0) return 0;
  return Math.min(maxMs, baseMs * 2 ** Math.min(failures - 1, 30));
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  /** keys added while being processed: run again once the current run ends */
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; abort: AbortController }>();
  private active = 0;
  private stopped = false;
  private idleWaiters: (() => void)[] = [];
  private readonly base: number;
  private readonly max: number;

  constructor(
    private readonly reconcile: ReconcileFn,
    private readonly o: WorkQueueOptions,
  ) {
    this.base = o.baseBackoffMs ?? 200;
    this.max = o.maxBackoffMs ?? 60_000;
  }

  add(key: string): void {
    if (this.stopped) return;
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.queue.push(key);
    this.pump();
  }

  /** adds key after delayMs; an earlier pending delayed add for the key wins */
  addAfter(key: string, delayMs: number): void {
    if (this.stopped) return;
    if (delayMs <= 0) {
      this.add(key);
      return;
    }
    const at = this.o.clock.now().getTime() + delayMs;
    const prev = this.delayed.get(key);
    if (prev && prev.at <= at) return;
    prev?.abort.abort();
    const abort = new AbortController();
    this.delayed.set(key, { at, abort });
    this.o.clock.sleep(delayMs, abort.signal).then(
      () => {
        if (this.delayed.get(key)?.abort === abort) this.delayed.delete(key);
        this.add(key);
      },
      () => undefined,
    );
  }

  failureCount(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  get length(): number {
    return this.queue.length;
  }

  /** resolves when nothing is queued or running (tests, graceful shutdown) */
  idle(): Promise<void> {
    if (this.active === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  stop(): void {
    this.stopped = true;
    for (const d of this.delayed.values()) d.abort.abort();
    this.delayed.clear();
    this.queue.length = 0;
    this.queued.clear();
  }

  private pump(): void {
    while (!this.stopped && this.active < this.o.concurrency && this.queue.length > 0) {
      const key = this.queue.shift()!;
      this.queued.delete(key);
      this.processing.add(key);
      this.active++;
      void this.runOne(key);
    }
  }

  private async runOne(key: string): Promise<void> {
    let next: ReconcileResult;
    let failed = false;
    try {
      next = await this.reconcile(key);
      this.failures.delete(key);
    } catch (err) {
      failed = true;
      const n = (this.failures.get(key) ?? 0) + 1;
      this.failures.set(key, n);
      const delay = backoffDelay(n, this.base, this.max);
      this.o.logger.warn(
        { key, failures: n, retryInMs: delay, err: String((err as Error)?.message ?? err) },
        "reconcile failed; backing off",
      );
      next = { requeueAfterMs: delay };
    }
    this.processing.delete(key);
    this.active--;
    // New events during a failed run do not skip the backoff: the delayed retry sees them.
    const wasDirty = this.dirty.delete(key);
    if (wasDirty && !failed) this.add(key);
    else if (next && next.requeueAfterMs !== undefined) this.addAfter(key, next.requeueAfterMs);
    this.pump();
    if (this.active === 0 && this.queue.length === 0) {
      const ws = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of ws) w();
    }
  }
}
