// Pause/resume as one service, owned and called by the Manager (docs/pause-resume.md). It holds
// what used to be copied across three layers:
//   - one queue per sandbox: every pause, resume, delete and recovery of a sandbox runs one at a
//     time, and the caller's own steps (the Manager's ownership check and admission) run inside
//     the same turn through TransitionHooks (core/types.ts), so they never interleave with another operation;
//   - one progress fan-out: a call queued behind another pause or resume of the sandbox, or
//     started while one runs, watches the same bytes move;
//   - the one auto-resume decision (autoResume.ts), asked by the Manager before exec, files,
//     logs and wait;
//   - what callers see of a sandbox while it is pausing, paused or resuming (its record laid over
//     what the backend reports).
// The operations themselves are the Snapshotter's; the backend only lends its two-method
// ComputeRelease capability.
import { TEAM_METADATA_KEY } from "../config/tenancy.ts";
import { ConflictError } from "../core/errors.ts";
import { KeyedQueue } from "../core/keyedQueue.ts";
import type { Logger } from "../core/log.ts";
import { ProgressFanout } from "../core/progressFanout.ts";
import type {
  Backend,
  LayerPathStats,
  PausedSnapshot,
  PauseResumeService,
  Sandbox,
  SandboxEvent,
  SandboxForCall,
  SandboxPhase,
  SandboxView,
  TransitionOptions,
} from "../core/types.ts";
import { decideAutoResume } from "./autoResume.ts";
import type { SnapshotRecord, SnapshotState } from "./record.ts";
import type { Snapshotter } from "./snapshotter.ts";

const PHASE: Record<Exclude<SnapshotState, "running">, SandboxPhase> = {
  pausing: "Pausing",
  paused: "Paused",
  resuming: "Resuming",
};

/**
 * The sandbox as callers should see it given its record; undefined = ask the backend. `kept`:
 * the backend's own view of it, for a backend whose sandbox object keeps its metadata while
 * paused (ComputeRelease.keepsMetadata): that metadata, which may have changed since the pause
 * (port exposures), is what the woken sandbox has, so it is what callers see.
 */
export function overlay(rec: SnapshotRecord | undefined, kept?: Sandbox): Sandbox | undefined {
  if (!rec || rec.state === "running") return undefined;
  const released = rec.computeReleased === true;
  return {
    ...rec.sandbox,
    ...(kept ? { metadata: kept.metadata } : {}),
    phase: PHASE[rec.state],
    ready: false,
    cpuRequestMillis: released ? 0 : rec.sandbox.cpuRequestMillis,
    memoryRequestBytes: released ? 0 : rec.sandbox.memoryRequestBytes,
  };
}

export interface PauseResumeOptions {
  /** the backend whose sandboxes are paused (the view lays records over its answers) */
  backend: Backend;
  snapshotter: Snapshotter;
  logger: Logger;
}

export class PauseResume implements PauseResumeService, SandboxView {
  private readonly queue = new KeyedQueue();
  private readonly progress = new ProgressFanout();
  /** the operation running per sandbox, which a delete stops */
  private readonly aborts = new Map<string, AbortController>();

  constructor(private readonly o: PauseResumeOptions) {}

  get snapshotter(): Snapshotter {
    return this.o.snapshotter;
  }

  layerStats(): LayerPathStats {
    return this.o.snapshotter.layerStats();
  }

  /** The pause/resume record, or undefined for a sandbox that was never paused. */
  status(id: string): Promise<SnapshotRecord | undefined> {
    return this.o.snapshotter.status(id);
  }

  records(): Promise<SnapshotRecord[]> {
    return this.o.snapshotter.records();
  }

  /** Sandboxes whose snapshot is kept or being written: what a team's paused quotas count. */
  async pausedSnapshots(): Promise<PausedSnapshot[]> {
    return (await this.o.snapshotter.records())
      .filter((r) => r.state !== "running")
      .map((r) => ({
        id: r.id,
        owner: r.owner,
        ...(r.spec.metadata[TEAM_METADATA_KEY] !== undefined
          ? { metadata: { [TEAM_METADATA_KEY]: r.spec.metadata[TEAM_METADATA_KEY] } }
          : {}),
        sizeBytes: r.snapshot?.sizeBytes ?? 0,
      }));
  }

  /** Idempotent: pausing a paused sandbox resolves with its record; a call queued behind a pause finds it done. */
  pause(id: string, opts: TransitionOptions = {}): Promise<SnapshotRecord> {
    return this.transition(id, "pause", opts, (signal) =>
      this.o.snapshotter.pause(id, this.progress.sink(id), signal, opts.snapshotWritten),
    );
  }

  /** Resuming a running sandbox is a no-op; a call queued behind a resume finds it running. */
  resume(id: string, opts: TransitionOptions = {}): Promise<Sandbox> {
    return this.transition(id, "resume", opts, (signal) =>
      this.o.snapshotter.resume(id, this.progress.sink(id), signal),
    );
  }

  /**
   * The auto-resume decision: true when a call named `what` (exec, upload files, ...) must wake
   * the sandbox first; a ConflictError when it is paused and does not allow it.
   */
  async wakeNeeded(id: string, what: string): Promise<boolean> {
    return decideAutoResume(await this.o.snapshotter.status(id), what) === "wake";
  }

  /** describe() and wakeNeeded() from one read of the record: the exec path reads it once. */
  async describeForCall(id: string): Promise<SandboxForCall> {
    const rec = await this.o.snapshotter.status(id);
    return { sandbox: await this.viewOf(id, rec), wake: (what) => decideAutoResume(rec, what) === "wake" };
  }

  /** Deletes the snapshot and the record (the caller deletes the sandbox itself). */
  remove(id: string): Promise<void> {
    return this.removeWith(id, async () => undefined);
  }

  /**
   * Deletes the sandbox (deleteSandbox), then its snapshot and record. A delete does not wait
   * for a long pause or resume: it stops it (the operation unwinds as after any failure: a pause
   * keeps the sandbox running, a resume leaves it paused), then runs in the sandbox's queue.
   */
  async removeWith(id: string, deleteSandbox: () => Promise<void>): Promise<void> {
    this.aborts
      .get(id)
      ?.abort(new ConflictError(`sandbox ${id} is being deleted; its pause or resume was stopped`, { id }));
    await this.queue.run(id, () => this.o.snapshotter.remove(id, deleteSandbox));
  }

  /** Paused sandboxes whose snapshot is older than the retention are deleted with it. Returns their ids. */
  async expire(): Promise<string[]> {
    const gone: string[] = [];
    for (const rec of await this.o.snapshotter.expired()) {
      this.o.logger.info(
        { sandbox: rec.id, owner: rec.owner, op: "expire", snapshot: rec.snapshot?.ref },
        "paused sandbox's snapshot passed the retention; deleting",
      );
      await this.delete(rec.id);
      gone.push(rec.id);
    }
    return gone;
  }

  /** After a crash: bring every record to running or paused-with-released-compute. */
  async recover(): Promise<void> {
    for (const rec of await this.o.snapshotter.records()) {
      await this.queue
        .run(rec.id, () => this.o.snapshotter.settle(rec.id))
        .catch((err: unknown) =>
          this.o.logger.error(
            { sandbox: rec.id, owner: rec.owner, op: "recover", err },
            "recovering pause/resume state failed; it is retried on the next start",
          ),
        );
    }
  }

  // ---- the view ----------------------------------------------------------------------------

  async describe(id: string): Promise<Sandbox | undefined> {
    return this.viewOf(id, await this.o.snapshotter.status(id));
  }

  /** The sandbox as callers see it, given its record (undefined: never paused). */
  private async viewOf(id: string, rec: SnapshotRecord | undefined): Promise<Sandbox | undefined> {
    if (!rec || rec.state === "running") return this.o.backend.describe(id);
    return overlay(rec, this.keepsMetadata ? await this.o.backend.describe(id) : undefined);
  }

  async list(): Promise<Sandbox[]> {
    const live = await this.o.backend.list();
    const records = new Map((await this.o.snapshotter.records()).map((r) => [r.id, r]));
    const out = live.map((s) => overlay(records.get(s.id), this.keepsMetadata ? s : undefined) ?? s);
    const seen = new Set(live.map((s) => s.id));
    for (const r of records.values()) {
      const o = overlay(r);
      if (o && !seen.has(r.id)) out.push(o);
    }
    return out;
  }

  /** A backend reports a paused sandbox's compute as deleted; callers must see it as Paused. */
  subscribe(listener: (event: SandboxEvent) => void): () => void {
    return this.o.backend.subscribe((event) => {
      const id = event.type === "delete" ? event.id : event.sandbox.id;
      this.o.snapshotter.status(id).then(
        (rec) => {
          const o = overlay(rec, this.keepsMetadata && event.type !== "delete" ? event.sandbox : undefined);
          listener(o ? { type: "upsert", sandbox: o } : event);
        },
        () => listener(event),
      );
    });
  }

  /** The sandbox and, after it, its snapshot (the record may live in the object the delete removes). */
  delete(id: string): Promise<void> {
    return this.removeWith(id, () => this.o.backend.delete(id));
  }

  // ---- internals ---------------------------------------------------------------------------

  /** true when the sandbox object keeps its metadata while paused (ComputeRelease.keepsMetadata) */
  get keepsMetadata(): boolean {
    return this.o.snapshotter.keepsMetadata;
  }

  private async transition<T>(
    id: string,
    op: "pause" | "resume",
    opts: TransitionOptions,
    run: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    // listening from the call on, not from its turn: a call queued behind another sees its bytes
    const unlisten = this.progress.add(id, op, opts.onProgress);
    try {
      return await this.queue.run(id, async () => {
        await opts.before?.();
        let result: T;
        try {
          result = await this.abortable(id, run);
        } catch (err) {
          opts.failed?.();
          throw err;
        }
        await opts.done?.();
        return result;
      });
    } finally {
      unlisten();
    }
  }

  /** Runs fn with a signal that a delete of the same sandbox aborts. */
  private async abortable<T>(id: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ac = new AbortController();
    this.aborts.set(id, ac);
    try {
      return await fn(ac.signal);
    } finally {
      if (this.aborts.get(id) === ac) this.aborts.delete(id);
    }
  }
}
