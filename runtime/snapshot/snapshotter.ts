// Pause and resume over the Backend seam, the same for every backend. A pause streams each
// writable path out of the sandbox (backend.getArchive) straight into a registry blob, puts
// a manifest, verifies it, records it durably and only then releases the compute. A resume
// takes compute again (adopt, else claim/provision), streams the layers back in
// (backend.putArchive, digest-verified), runs the post-resume hook and records running.
// Every transition is written to the SnapshotRecordStore first; settle() finishes or undoes
// whatever a crash interrupted, so a sandbox is always running with its data or paused with a
// verified snapshot.
// This is the engine of one operation at a time: it keeps no queue and no listeners. The
// pause/resume service (service.ts) runs every operation of a sandbox through its one queue,
// fans progress out and stops an operation when the sandbox is deleted.
import type { Clock } from "../core/clock.ts";
import { ConflictError, NotFoundError, SbxError, UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import {
  type Backend,
  type ComputeRelease,
  type LayerPathStats,
  type Sandbox,
  type SandboxSpec,
  TERMINAL_PHASES,
  type TransferProgress,
} from "../core/types.ts";
import { allowsAutoResume } from "./autoResume.ts";
import { runHook } from "./hooks.ts";
import { allLayers, type DirectLayers, type LayerIo, restoreLayer } from "./layers.ts";
import { snapshotTag } from "./manifest.ts";
import type { OciClient } from "./oci.ts";
import {
  fromStoredSpec,
  type SnapshotInfo,
  type SnapshotRecord,
  type SnapshotRecordStore,
  toStoredSpec,
} from "./record.ts";
import { computeAlive, planRecovery, type RecoveryObserved, type RecoveryPlan } from "./recoveryPlan.ts";
import { RegistrySnapshots } from "./registrySnapshots.ts";

export const DEFAULT_WRITABLE_PATHS = ["/workspace", "/tmp"];

/** Metadata keys of the hooks a sandbox can set at create time (sbx.auto-resume: autoResume.ts). */
export const META = {
  prePause: "sbx.pre-pause", // shell command run before the archive is taken
  postResume: "sbx.post-resume", // shell command run after the data is back
} as const;

export type PauseStep =
  | "pausing-recorded"
  | "pre-pause-hook"
  | "layer-pushed"
  | "manifest-put"
  | "paused-recorded"
  | "compute-released";
export type ResumeStep =
  | "resuming-recorded"
  | "slot-acquired"
  | "layer-restored"
  | "post-resume-hook"
  | "running-recorded";

export interface SnapshotterOptions {
  backend: Backend;
  /** how the platform gives compute back and takes it again (runtime/platform.ts PauseSupport) */
  compute: ComputeRelease;
  oci: OciClient;
  /** registry repository holding every sandbox's snapshots, e.g. sbx-snapshots */
  repository: string;
  store: SnapshotRecordStore;
  clock: Clock;
  logger: Logger;
  /** how to start compute for this sandbox again; called at pause time and stored with the record */
  specFor(sandbox: Sandbox): Promise<SandboxSpec>;
  retentionDays: number;
  writablePaths?: string[];
  /** when the sandbox's metadata does not say (autoResume.ts) */
  autoResumeDefault?: boolean;
  readyTimeoutMs?: number;
  hookTimeoutMs?: number;
  /**
   * Several runtime processes sharing one record store (Kubernetes replicas): this process's
   * name, written into every record it touches, and how long another holder's pausing or
   * resuming record is left alone before it counts as abandoned (its process died) and is
   * recovered. Without inFlightGraceMs (one process owns the store, as locally) every
   * in-flight record found outside a running operation is abandoned.
   */
  holder?: string;
  inFlightGraceMs?: number;
  /** test seam: called after each durable step (crash tests kill the process here) */
  onStep?(id: string, step: PauseStep | ResumeStep): void | Promise<void>;
  /** registry garbage collection (gc.ts): a push (blobs, then their manifest) never overlaps one */
  gc?: { whilePushing<T>(push: () => Promise<T>): Promise<T> };
  /** the sandboxes move their own layers when they can (layers.ts DirectLayers) */
  direct?: DirectLayers;
}

type OnProgress = (p: TransferProgress) => void;

export class Snapshotter {
  private readonly io: LayerIo;
  /** the registry side: push, read back, delete (registrySnapshots.ts) */
  private readonly snapshots: RegistrySnapshots;

  constructor(private readonly o: SnapshotterOptions) {
    this.io = {
      backend: o.backend,
      oci: o.oci,
      repository: o.repository,
      direct: o.direct,
      counts: { podPush: 0, replicaPush: 0, podRestore: 0, replicaRestore: 0 },
    };
    const paths = o.writablePaths ?? DEFAULT_WRITABLE_PATHS;
    this.snapshots = new RegistrySnapshots({ io: this.io, paths, clock: o.clock, logger: o.logger });
  }

  /** Layers moved since start, by the path that moved them. */
  layerStats(): LayerPathStats {
    return { ...this.io.counts! };
  }

  /** The pause/resume record, or undefined for a sandbox that was never paused. */
  status(id: string): Promise<SnapshotRecord | undefined> {
    return this.o.store.get(id);
  }

  /** Every sandbox that has a pause/resume record. */
  records(): Promise<SnapshotRecord[]> {
    return this.o.store.list();
  }

  /**
   * Deletes the sandbox (deleteSandbox) and then its snapshot and record. The record is read
   * first because it may live in the object the delete removes (the Kubernetes Sandbox).
   */
  async remove(id: string, deleteSandbox: () => Promise<void>): Promise<void> {
    const rec = await this.o.store.get(id);
    await deleteSandbox();
    if (!rec) return;
    if (rec.snapshot) await this.o.oci.deleteManifest(this.o.repository, rec.snapshot.digest);
    if (rec.pending) await this.snapshots.deleteTag(rec.pending.tag);
    await this.o.store.delete(id);
  }

  /** Paused sandboxes whose snapshot is older than the retention (the service deletes them). */
  async expired(): Promise<SnapshotRecord[]> {
    const cutoff = this.o.clock.now().getTime() - this.o.retentionDays * 86_400_000;
    return (await this.o.store.list()).filter(
      (rec) => rec.state === "paused" && rec.snapshot && Date.parse(rec.snapshot.createdAt) <= cutoff,
    );
  }

  /** true when the sandbox object keeps its metadata while paused (ComputeRelease.keepsMetadata) */
  get keepsMetadata(): boolean {
    return this.o.compute.keepsMetadata === true;
  }

  // Over 60 lines on purpose: the pause steps (freeze, capture, paused-quota check, record) read
  // in order as the crash-recovery plan names them.
  /** Idempotent: pausing a paused sandbox resolves with its record. */
  async pause(
    id: string,
    onProgress: OnProgress | undefined,
    signal: AbortSignal,
    written?: (sizeBytes: number) => Promise<void> | void,
  ): Promise<SnapshotRecord> {
    let rec = await this.settle(id);
    if (rec?.state === "paused") return rec;
    const sandbox = await this.o.backend.describe(id);
    if (!sandbox) throw new NotFoundError("sandbox", id);
    if (TERMINAL_PHASES.has(sandbox.phase))
      throw new ConflictError(
        `pause: sandbox ${id} is ${sandbox.phase} (${sandbox.reason ?? "finished"}); only a running sandbox can be paused`,
      );
    const spec = await this.o.specFor(sandbox);
    const generation = (rec?.generation ?? 0) + 1;
    const tag = snapshotTag(id, generation);
    rec = {
      id,
      owner: sandbox.owner,
      state: "pausing",
      generation,
      snapshot: rec?.snapshot,
      pending: { tag, startedAt: this.o.clock.now().toISOString() },
      spec: toStoredSpec(spec),
      sandbox,
      autoResume: allowsAutoResume(spec.metadata, this.o.autoResumeDefault ?? true),
      updatedAt: this.o.clock.now().toISOString(),
    };
    await this.put(rec);
    await this.step(id, "pausing-recorded");
    let snapshot: SnapshotInfo;
    try {
      const hook = spec.metadata[META.prePause];
      if (hook) await runHook(this.o.backend, id, "pre-pause", hook, this.o.hookTimeoutMs ?? 60_000);
      await this.step(id, "pre-pause-hook");
      signal.throwIfAborted();
      const hooks = { onProgress, step: (st: PauseStep) => this.step(id, st) };
      const push = () => this.snapshots.push(rec!, tag, hooks, signal);
      snapshot = await (this.o.gc ? this.o.gc.whilePushing(push) : push());
      await written?.(snapshot.sizeBytes);
    } catch (err) {
      await this.put({ ...rec, state: "running", pending: undefined });
      await this.snapshots
        .deleteTag(tag)
        .catch((e: unknown) =>
          this.o.logger.warn(
            { sandbox: id, owner: rec!.owner, op: "pause", tag, err: e },
            "deleting the manifest of a failed pause failed; it stays in the registry as an orphan until retention or a manual delete",
          ),
        );
      throw err;
    }
    const previous = rec.snapshot;
    rec = await this.put({ ...rec, state: "paused", snapshot, pending: undefined, computeReleased: false });
    await this.step(id, "paused-recorded");
    rec = await this.release(rec);
    await this.step(id, "compute-released");
    if (previous && previous.digest !== snapshot.digest) await this.snapshots.drop(previous);
    return rec;
  }

  /** The snapshot is already recorded, so a failure here loses nothing: retry, then report. */
  private async release(rec: SnapshotRecord): Promise<SnapshotRecord> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.o.compute.releaseCompute(rec.id);
        return await this.put({ ...rec, computeReleased: true });
      } catch (err) {
        if (attempt >= 3) {
          throw new UpstreamError(
            `pause ${rec.id}: the snapshot ${rec.snapshot?.ref} is recorded, but releasing the compute failed ${attempt} times: ${(err as Error).message}; ` +
              "the next pause call or a restart retries it",
          );
        }
        this.o.logger.warn(
          { sandbox: rec.id, owner: rec.owner, op: "pause", attempt, err },
          "releasing compute failed; retrying",
        );
        await this.o.clock.sleep(200 * attempt);
      }
    }
  }

  /** Resuming a running sandbox is a no-op. */
  async resume(id: string, onProgress: OnProgress | undefined, signal: AbortSignal): Promise<Sandbox> {
    let rec = await this.settle(id);
    if (!rec || rec.state === "running") {
      const s = await this.o.backend.describe(id);
      if (!s) throw new NotFoundError("sandbox", id);
      return s;
    }
    if (!rec.snapshot) throw new ConflictError(`resume: sandbox ${id} is ${rec.state} without a snapshot; kill it`);
    rec = await this.put({ ...rec, state: "resuming" });
    await this.step(id, "resuming-recorded");
    try {
      const spec = fromStoredSpec(rec.spec);
      const { backend } = this.o;
      await this.o.compute.adopt(spec);
      signal.throwIfAborted();
      await backend.awaitReady(id, { timeoutMs: this.o.readyTimeoutMs ?? 120_000, signal });
      await this.step(id, "slot-acquired");
      await allLayers(rec.snapshot!.layers, signal, async (layer, signal) => {
        if (layer.entries !== 0) {
          await restoreLayer(this.io, id, rec!.snapshot!, layer, signal, (bytes) =>
            onProgress?.({ op: "resume", path: layer.path, bytes, totalBytes: layer.size }),
          );
        }
        await this.step(id, "layer-restored");
      });
      const hook = spec.metadata[META.postResume];
      if (hook) await runHook(backend, id, "post-resume", hook, this.o.hookTimeoutMs ?? 60_000);
      await this.step(id, "post-resume-hook");
    } catch (err) {
      // The snapshot is untouched; throw the half-restored slot away so a retry starts clean.
      await this.o.compute
        .releaseCompute(id)
        .catch((e: unknown) =>
          this.o.logger.warn({ sandbox: id, op: "resume", err: e }, "releasing a failed resume's compute failed"),
        );
      await this.put({ ...rec, state: "paused", computeReleased: true });
      throw err instanceof SbxError
        ? err
        : new UpstreamError(`resume ${id}: ${(err as Error).message}; the snapshot is intact, retry the resume`);
    }
    const snapshot = rec.snapshot!;
    await this.put({ ...rec, state: "running", snapshot: undefined, computeReleased: false });
    await this.step(id, "running-recorded");
    // off the critical path: the sandbox is running; a failure only leaves garbage for retention
    void this.snapshots.drop(snapshot);
    const s = await this.o.backend.describe(id);
    if (!s) throw new NotFoundError("sandbox", id);
    return s;
  }

  /**
   * Finishes or undoes an interrupted transition (crash recovery, and the first step of every
   * pause and resume). Observes, plans (recoveryPlan.ts), applies. Returns the settled record.
   */
  async settle(id: string): Promise<SnapshotRecord | undefined> {
    const rec = await this.o.store.get(id);
    if (!rec) return undefined;
    const plan = planRecovery(rec, await this.observe(rec), this.o.clock.now(), {
      holder: this.o.holder,
      inFlightGraceMs: this.o.inFlightGraceMs,
    });
    return this.apply(rec, plan);
  }

  /** What the plan needs to know; the registry is only asked when the answer can matter. */
  private async observe(rec: SnapshotRecord): Promise<RecoveryObserved> {
    if (rec.state !== "pausing") return {};
    const tag = rec.pending?.tag;
    const pendingManifest = tag ? await this.o.oci.headManifest(this.o.repository, tag) : undefined;
    const livePhase = (await this.o.backend.describe(rec.id))?.phase;
    const observed: RecoveryObserved = { livePhase, ...(pendingManifest ? { pendingManifest } : {}) };
    // a live sandbox goes back to running whatever the manifest holds: no need to read it
    if (pendingManifest && tag && !computeAlive(livePhase)) {
      const snap = await this.snapshots.fromTag(tag, pendingManifest.digest);
      if (snap) observed.pendingSnapshot = snap;
    }
    return observed;
  }

  private async apply(rec: SnapshotRecord, plan: RecoveryPlan): Promise<SnapshotRecord | undefined> {
    const log = this.o.logger.child({ sandbox: rec.id, owner: rec.owner, op: "recover" });
    switch (plan.action) {
      case "keep":
        return rec;
      case "refuse": {
        const doing = rec.state === "pausing" ? "paused" : "resumed";
        throw new ConflictError(
          `sandbox ${rec.id} is being ${doing} by runtime replica ${plan.holder} (its last step was ${Math.round(plan.ageMs / 1000)} s ago); ` +
            `retry when it finishes, or after ${Math.round(plan.graceMs / 1000)} s if that replica died`,
          { id: rec.id, holder: plan.holder },
        );
      }
      case "back-to-running":
        log.warn({ tag: rec.pending?.tag }, "pause was interrupted before it was recorded; the sandbox keeps running");
        if (plan.deleteManifest) await this.o.oci.deleteManifest(this.o.repository, plan.deleteManifest);
        return this.put({ ...rec, state: "running", pending: undefined });
      case "promote":
        return this.release(await this.put({ ...rec, state: "paused", snapshot: plan.snapshot, pending: undefined }));
      case "keep-previous":
        return this.release(await this.put({ ...rec, state: "paused", pending: undefined }));
      case "drop":
        log.error("pause was interrupted and the compute is gone without a snapshot; the sandbox's data is lost");
        await this.o.store.delete(rec.id);
        return undefined;
      case "release":
        log.info("pause was recorded but compute not yet released; releasing");
        return this.release(rec);
      case "discard-resume":
        log.warn("resume was interrupted; discarding the half-restored compute, the snapshot is intact");
        await this.o.compute.releaseCompute(rec.id);
        return this.put({ ...rec, state: "paused", computeReleased: true });
    }
  }

  private async put(rec: SnapshotRecord): Promise<SnapshotRecord> {
    const next: SnapshotRecord = { ...rec, updatedAt: this.o.clock.now().toISOString() };
    if (this.o.holder) next.holder = this.o.holder;
    await this.o.store.put(next);
    return next;
  }

  private async step(id: string, step: PauseStep | ResumeStep): Promise<void> {
    await this.o.onStep?.(id, step);
  }
}
