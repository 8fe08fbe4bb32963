// Write-behind for Sandbox records. A create is accepted (admitted, id assigned, visible to
// this replica's reads and waits) before its record reaches the API server; a bounded pool
// of writers persists records right after. Why: one record write costs ~5 ms idle and
// hundreds of ms when the API server is busy, and a closed loop of 50 clients would make
// every create pay the API server's queue. What it costs, stated plainly: a replica that
// dies in the few ms between accept and write loses those accepts (their waits answer
// NotFound and a retry with the same clientKey creates them again), and the budget rebuilt
// after a restart, counting only written records, matches exactly what then exists.
import type { Clock } from "../core/clock.ts";
import { CapacityError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxResource } from "./resource.ts";

export interface RecordWriterOptions {
  clock: Clock;
  logger: Logger;
  /** persists one record; resolves with what the API server stored */
  create(cr: SandboxResource): Promise<SandboxResource>;
  isConflict(err: unknown): boolean;
  /** a record reached the API server */
  onWritten(cr: SandboxResource): void;
  /** a record could not be written (after retries); the sandbox fails with this message */
  onFailed(id: string, reason: string, message: string): void;
  concurrency?: number;
  /** accepts waiting beyond this are refused with 429 instead of queueing without bound */
  maxPending?: number;
  retries?: number;
}

interface Pending {
  cr: SandboxResource;
  done: Promise<void>;
  settle(): void;
  cancelled: boolean;
}

export class RecordWriter {
  private readonly pending = new Map<string, Pending>();
  private readonly queue: string[] = [];
  private active = 0;
  private readonly concurrency: number;
  private readonly maxPending: number;
  private readonly retries: number;
  /** accept -> written, per record: the durability lag the benchmarks report */
  readonly lagMs: number[] = [];

  constructor(private readonly o: RecordWriterOptions) {
    this.concurrency = o.concurrency ?? 32;
    this.maxPending = o.maxPending ?? 2_000;
    this.retries = o.retries ?? 4;
  }

  get size(): number {
    return this.pending.size;
  }

  /** Throws CapacityError when the API server is too far behind to take another accept. */
  checkRoom(): void {
    if (this.pending.size >= this.maxPending) {
      throw new CapacityError(
        `the Kubernetes API server is behind: ${this.pending.size} sandbox records are waiting to be written; retry shortly`,
        1,
        { reason: "api_backlog", pending: this.pending.size },
      );
    }
  }

  /** Queues the record (call checkRoom first). */
  enqueue(cr: SandboxResource): void {
    const id = cr.metadata.name;
    this.checkRoom();
    let settle!: () => void;
    const done = new Promise<void>((r) => (settle = r));
    this.pending.set(id, { cr, done, settle, cancelled: false });
    this.queue.push(id);
    this.pump();
  }

  isPending(id: string): boolean {
    return this.pending.has(id);
  }

  /** resolves once the record's write finished (either way); immediately when nothing is pending */
  settled(id: string): Promise<void> {
    return this.pending.get(id)?.done ?? Promise.resolve();
  }

  /** a delete before the write started: the record is never written */
  cancel(id: string): boolean {
    const p = this.pending.get(id);
    if (!p || !this.queue.includes(id)) return false;
    p.cancelled = true;
    return true;
  }

  /** drops every write not yet started (a crash); writes already sent may still land */
  abandon(): void {
    for (const id of this.queue.splice(0)) {
      const p = this.pending.get(id);
      if (p) this.finish(id, p);
    }
  }

  async drain(): Promise<void> {
    await Promise.all([...this.pending.values()].map((p) => p.done));
  }

  private pump(): void {
    while (this.active < this.concurrency && this.queue.length > 0) {
      const id = this.queue.shift()!;
      const p = this.pending.get(id);
      if (!p) continue;
      if (p.cancelled) {
        this.finish(id, p);
        continue;
      }
      this.active++;
      void this.write(id, p).finally(() => {
        this.active--;
        this.finish(id, p);
        this.pump();
      });
    }
  }

  private finish(id: string, p: Pending): void {
    if (this.pending.get(id) === p) this.pending.delete(id);
    p.settle();
  }

  private async write(id: string, p: Pending): Promise<void> {
    const started = this.o.clock.now().getTime();
    let lastErr: unknown;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt > 0) await this.o.clock.sleep(Math.min(2_000, 100 * 2 ** (attempt - 1)));
      try {
        const created = await this.o.create(p.cr);
        this.lagMs.push(this.o.clock.now().getTime() - Date.parse(p.cr.spec.createdAt));
        if (this.lagMs.length > 100_000) this.lagMs.splice(0, 50_000);
        this.o.onWritten(created);
        return;
      } catch (err) {
        lastErr = err;
        if (this.o.isConflict(err)) {
          this.o.onFailed(
            id,
            "IdConflict",
            `a sandbox named ${id} already exists in the cluster; create again with a new id`,
          );
          return;
        }
        this.o.logger.warn(
          { sandbox: id, attempt, err: String((err as Error)?.message ?? err) },
          "writing the sandbox record failed; retrying",
        );
      }
    }
    const took = this.o.clock.now().getTime() - started;
    this.o.onFailed(
      id,
      "RecordWriteFailed",
      `the sandbox record could not be written in ${this.retries + 1} attempts over ${took} ms: ${String((lastErr as Error)?.message ?? lastErr)}`,
    );
  }
}
