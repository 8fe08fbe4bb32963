// Idle tracking without a write per API call: touches are coalesced per sandbox and flushed
// as one annotation patch per sandbox per interval. An exec storm on one sandbox costs one
// patch every intervalMs, not one per exec; other replicas see the activity after a flush.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";

export interface ActivityRecorderOptions {
  clock: Clock;
  logger: Logger;
  intervalMs: number;
  /** persists the latest activity time of one sandbox; a NotFound means it is gone (dropped) */
  write(id: string, at: Date): Promise<void>;
  /** writes in flight at once (default FLUSH_CONCURRENCY) */
  concurrency?: number;
  isNotFound(err: unknown): boolean;
}

/**
 * A flush's writes in flight at once. A flush is a patch per busy sandbox (1,000 at 1,000
 * streaming execs), background work on the replica's API connection pool (at most 32
 * connections, client.ts): all at once they held every connection, and a create queued behind
 * them for seconds. With 8 the rest of the pool stays free for requests someone waits on.
 */
export const FLUSH_CONCURRENCY = 8;

export class ActivityRecorder {
  private readonly pending = new Map<string, Date>();
  private readonly abort = new AbortController();
  private loop?: Promise<void>;

  constructor(private readonly o: ActivityRecorderOptions) {}

  start(): void {
    this.loop ??= this.run();
  }

  record(id: string, at: Date): void {
    const prev = this.pending.get(id);
    if (!prev || prev < at) this.pending.set(id, at);
  }

  /** the newest unflushed activity, so this replica's own reads are never behind its writes */
  latest(id: string): Date | undefined {
    return this.pending.get(id);
  }

  forget(id: string): void {
    this.pending.delete(id);
  }

  /** writes everything pending now (also used on close) */
  async flush(): Promise<void> {
    const batch = [...this.pending];
    this.pending.clear();
    let next = 0;
    const lanes = Math.max(1, Math.min(this.o.concurrency ?? FLUSH_CONCURRENCY, batch.length));
    await Promise.all(
      Array.from({ length: lanes }, async () => {
        while (next < batch.length) await this.writeOne(...batch[next++]);
      }),
    );
  }

  private async writeOne(id: string, at: Date): Promise<void> {
    try {
      await this.o.write(id, at);
    } catch (err) {
      if (this.o.isNotFound(err)) return;
      // keep it for the next round unless something newer arrived meanwhile
      const now = this.pending.get(id);
      if (!now || now < at) this.pending.set(id, at);
      this.o.logger.warn(
        { sandbox: id, err: String((err as Error).message ?? err) },
        "recording sandbox activity failed; retrying next interval",
      );
    }
  }

  async close(): Promise<void> {
    this.abort.abort(new Error("closed"));
    await this.loop;
    await this.flush();
  }

  private async run(): Promise<void> {
    for (;;) {
      try {
        await this.o.clock.sleep(this.o.intervalMs, this.abort.signal);
      } catch {
        return;
      }
      await this.flush();
    }
  }
}
