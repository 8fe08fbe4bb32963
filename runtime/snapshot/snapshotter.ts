// Pause and resume over the Backend seam, the same for every backend. A pause streams each
// writable path out of the sandbox (backend.getArchive) straight into a registry blob, puts
// a manifest, verifies it, records it durably and only then releases the compute. A resume
// takes compute again (adopt, else claim/provision), streams the layers back in
// (backend.putArchive, digest-verified), runs the post-resume hook and records running.
// Every transition is written to the SnapshotRecordStore first; recover() finishes or undoes
// whatever a crash interrupted, so a sandbox is always running with its data or paused with a
// verified snapshot.
import type { Clock } from "../core/clock.ts";
import { KeyedQueue } from "../core/keyed-queue.ts";
import { ConflictError, NotFoundError, SbxError, UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { TERMINAL_PHASES, type Backend, type Sandbox, type SandboxSpec } from "../core/types.ts";
import { pushLayer, restoreLayer, verifySnapshot, type LayerIo } from "./layers.ts";
import { buildSnapshotManifest, readSnapshotLayers, snapshotTag, type SnapshotConfig } from "./manifest.ts";
import type { OciClient } from "./oci.ts";
import { fromStoredSpec, toStoredSpec, type SnapshotInfo, type SnapshotLayer, type SnapshotRecord, type SnapshotRecordStore } from "./record.ts";
import { runHook } from "./hooks.ts";

export const DEFAULT_WRITABLE_PATHS = ["/workspace", "/tmp"];

/** Metadata keys a sandbox can set at create time. */
export const META = {
  autoResume: "sbx.auto-resume", // "true" | "false"
  prePause: "sbx.pre-pause", // shell command run before the archive is taken
  postResume: "sbx.post-resume", // shell command run after the data is back
} as const;

export type PauseStep = "pausing-recorded" | "pre-pause-hook" | "layer-pushed" | "manifest-put" | "paused-recorded" | "compute-released";
export type ResumeStep = "resuming-recorded" | "slot-acquired" | "layer-restored" | "post-resume-hook" | "running-recorded";

export interface Progress {
  op: "pause" | "resume";
  path: string;
  /** bytes of this path moved so far */
  bytes: number;
  /** known on resume (layer size) */
  totalBytes?: number;
}

export interface SnapshotterOptions {
  backend: Backend;
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
  /** when the sandbox's metadata does not say (META.autoResume) */
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
}

export interface OpOptions {
  onProgress?(p: Progress): void;
}

export class Snapshotter {
  private readonly locks = new KeyedQueue();
  private readonly resuming = new Map<string, Promise<Sandbox>>();
  /** the pause or resume running per sandbox, which a delete stops */
  private readonly aborts = new Map<string, AbortController>();
  private readonly pausing = new Map<string, Promise<SnapshotRecord>>();
  private readonly paths: string[];

  private readonly io: LayerIo;

  constructor(private readonly o: SnapshotterOptions) {
    this.io = { backend: o.backend, oci: o.oci, repository: o.repository };
    this.paths = o.writablePaths ?? DEFAULT_WRITABLE_PATHS;
  }

  /** The pause/resume record, or undefined for a sandbox that was never paused. */
  status(id: string): Promise<SnapshotRecord | undefined> {
    return this.o.store.get(id);
  }

  /** Every sandbox that has a pause/resume record. */
  records(): Promise<SnapshotRecord[]> {
    return this.o.store.list();
  }

  /** Idempotent: pausing a paused sandbox resolves with its record; concurrent calls share one pause. */
  pause(id: string, opts: OpOptions = {}): Promise<SnapshotRecord> {
    return share(this.pausing, id, () => this.serial(id, () => this.abortable(id, (signal) => this.doPause(id, opts, signal))));
  }

  /** Resuming a running sandbox is a no-op; concurrent calls share one resume. */
  resume(id: string, opts: OpOptions = {}): Promise<Sandbox> {
    return share(this.resuming, id, () => this.serial(id, () => this.abortable(id, (signal) => this.doResume(id, opts, signal))));
  }

  /** Deletes the snapshot and the record (the caller deletes the sandbox itself). */
  remove(id: string): Promise<void> {
    return this.removeWith(id, async () => undefined);
  }

  /**
   * Deletes the sandbox (deleteSandbox) and then its snapshot and record. The record is read
   * first because it may live in the object the delete removes (the Kubernetes Sandbox).
   */
  async removeWith(id: string, deleteSandbox: () => Promise<void>): Promise<void> {
    // A kill does not wait for a long pause or resume to finish: it stops it. The operation
    // unwinds as after any failure (a pause keeps the sandbox running, a resume leaves it
    // paused), then the delete runs.
    this.aborts.get(id)?.abort(new ConflictError(`sandbox ${id} is being deleted; its pause or resume was stopped`, { id }));
    await this.serial(id, async () => {
      const rec = await this.o.store.get(id);
      await deleteSandbox();
      if (!rec) return;
      if (rec.snapshot) await this.o.oci.deleteManifest(this.o.repository, rec.snapshot.digest);
      if (rec.pending) await this.deleteTag(rec.pending.tag);
      await this.o.store.delete(id);
    });
  }

  /** Paused sandboxes whose snapshot is older than the retention are deleted with it. Returns their ids. */
  async expire(): Promise<string[]> {
    const cutoff = this.o.clock.now().getTime() - this.o.retentionDays * 86_400_000;
    const gone: string[] = [];
    for (const rec of await this.o.store.list()) {
      if (rec.state !== "paused" || !rec.snapshot || Date.parse(rec.snapshot.createdAt) > cutoff) continue;
      this.o.logger.info({ sandbox: rec.id, owner: rec.owner, op: "expire", snapshot: rec.snapshot.ref }, "paused sandbox's snapshot passed the retention; deleting");
      await this.removeWith(rec.id, () => this.o.backend.delete(rec.id));
      gone.push(rec.id);
    }
    return gone;
  }

  /** After a crash: bring every record to running or paused-with-released-compute. */
  async recover(): Promise<void> {
    for (const rec of await this.o.store.list()) {
      await this.serial(rec.id, () => this.recoverOne(rec.id)).catch((err: unknown) =>
        this.o.logger.error({ sandbox: rec.id, owner: rec.owner, op: "recover", err }, "recovering pause/resume state failed; it is retried on the next start"),
      );
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

  private async doPause(id: string, opts: OpOptions, signal: AbortSignal): Promise<SnapshotRecord> {
    let rec = await this.recoverOne(id);
    if (rec?.state === "paused") return rec;
    const sandbox = await this.o.backend.describe(id);
    if (!sandbox) throw new NotFoundError("sandbox", id);
    if (TERMINAL_PHASES.has(sandbox.phase)) throw new ConflictError(`pause: sandbox ${id} is ${sandbox.phase} (${sandbox.reason ?? "finished"}); only a running sandbox can be paused`);
    if (!this.o.backend.releaseCompute) throw new ConflictError(`pause: the ${this.o.backend.name} backend cannot release compute; kill the sandbox instead`);
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
      autoResume: (spec.metadata[META.autoResume] ?? String(this.o.autoResumeDefault ?? true)) === "true",
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
      snapshot = await this.pushSnapshot(rec, tag, opts, signal);
    } catch (err) {
      await this.put({ ...rec, state: "running", pending: undefined });
      await this.deleteTag(tag).catch(() => undefined);
      throw err;
    }
    const previous = rec.snapshot;
    rec = await this.put({ ...rec, state: "paused", snapshot, pending: undefined, computeReleased: false });
    await this.step(id, "paused-recorded");
    rec = await this.release(rec);
    await this.step(id, "compute-released");
    if (previous && previous.digest !== snapshot.digest) await this.dropSnapshot(previous);
    return rec;
  }

  private async pushSnapshot(rec: SnapshotRecord, tag: string, opts: OpOptions, signal: AbortSignal): Promise<SnapshotInfo> {
    const { oci, repository } = this.o;
    // paths stream concurrently: each is its own archive exec and its own upload
    const layers: SnapshotLayer[] = await Promise.all(
      this.paths.map(async (path) => {
        const layer = await pushLayer(this.io, rec.id, path, signal, (bytes) => opts.onProgress?.({ op: "pause", path, bytes }));
        await this.step(rec.id, "layer-pushed");
        return layer;
      }),
    );
    const createdAt = this.o.clock.now().toISOString();
    const config: SnapshotConfig = { sandbox: rec.id, owner: rec.owner, generation: rec.generation, createdAt, paths: this.paths, spec: rec.spec };
    const cfg = await oci.pushSmallBlob(repository, Buffer.from(JSON.stringify(config)));
    const manifest = buildSnapshotManifest(cfg, layers, { sandbox: rec.id, createdAt });
    const put = await oci.putManifest(repository, tag, manifest);
    await this.step(rec.id, "manifest-put");
    const info: SnapshotInfo = {
      repository,
      tag,
      ref: `${oci.base.host}/${repository}@${put.digest}`,
      digest: put.digest,
      sizeBytes: layers.reduce((n, l) => n + l.size, 0),
      createdAt,
      layers,
    };
    const problem = await verifySnapshot(oci, info);
    if (problem) throw new UpstreamError(`pause ${rec.id}: snapshot ${info.ref} failed verification after push (${problem}); the sandbox keeps running, retry the pause`);
    return info;
  }

  /** The snapshot is already recorded, so a failure here loses nothing: retry, then report. */
  private async release(rec: SnapshotRecord): Promise<SnapshotRecord> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.o.backend.releaseCompute!(rec.id);
        return await this.put({ ...rec, computeReleased: true });
      } catch (err) {
        if (attempt >= 3) {
          throw new UpstreamError(
            `pause ${rec.id}: the snapshot ${rec.snapshot?.ref} is recorded, but releasing the compute failed ${attempt} times: ${(err as Error).message}; ` +
              "the next pause call or a restart retries it",
          );
        }
        this.o.logger.warn({ sandbox: rec.id, owner: rec.owner, op: "pause", attempt, err }, "releasing compute failed; retrying");
        await this.o.clock.sleep(200 * attempt);
      }
    }
  }

  private async doResume(id: string, opts: OpOptions, signal: AbortSignal): Promise<Sandbox> {
    let rec = await this.recoverOne(id);
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
      if (backend.adopt) await backend.adopt(spec);
      else if (!(await backend.claim(spec))) await backend.provision(spec);
      signal.throwIfAborted();
      await backend.awaitReady(id, { timeoutMs: this.o.readyTimeoutMs ?? 120_000, signal });
      await this.step(id, "slot-acquired");
      await Promise.all(
        rec.snapshot!.layers.map(async (layer) => {
          if (layer.entries !== 0) {
            await restoreLayer(this.io, id, rec!.snapshot!, layer, signal, (bytes) => opts.onProgress?.({ op: "resume", path: layer.path, bytes, totalBytes: layer.size }));
          }
          await this.step(id, "layer-restored");
        }),
      );
      const hook = spec.metadata[META.postResume];
      if (hook) await runHook(backend, id, "post-resume", hook, this.o.hookTimeoutMs ?? 60_000);
      await this.step(id, "post-resume-hook");
    } catch (err) {
      // The snapshot is untouched; throw the half-restored slot away so a retry starts clean.
      await this.o.backend.releaseCompute?.(id).catch((e: unknown) => this.o.logger.warn({ sandbox: id, op: "resume", err: e }, "releasing a failed resume's compute failed"));
      await this.put({ ...rec, state: "paused", computeReleased: true });
      throw err instanceof SbxError ? err : new UpstreamError(`resume ${id}: ${(err as Error).message}; the snapshot is intact, retry the resume`);
    }
    const snapshot = rec.snapshot!;
    await this.put({ ...rec, state: "running", snapshot: undefined, computeReleased: false });
    await this.step(id, "running-recorded");
    // off the critical path: the sandbox is running; a failure only leaves garbage for retention
    void this.dropSnapshot(snapshot);
    const s = await this.o.backend.describe(id);
    if (!s) throw new NotFoundError("sandbox", id);
    return s;
  }

  /** Finishes or undoes an interrupted transition. Returns the settled record. */
  private async recoverOne(id: string): Promise<SnapshotRecord | undefined> {
    const rec = await this.o.store.get(id);
    if (!rec) return undefined;
    const log = this.o.logger.child({ sandbox: id, owner: rec.owner, op: "recover" });
    this.refuseForeignInFlight(rec);
    if (rec.state === "pausing") {
      const pendingTag = rec.pending?.tag;
      const head = pendingTag ? await this.o.oci.headManifest(this.o.repository, pendingTag) : undefined;
      const live = await this.o.backend.describe(id);
      if (live && !TERMINAL_PHASES.has(live.phase) && live.phase !== "Paused") {
        log.warn({ tag: pendingTag }, "pause was interrupted before it was recorded; the sandbox keeps running");
        if (head) await this.o.oci.deleteManifest(this.o.repository, head.digest);
        return this.put({ ...rec, state: "running", pending: undefined });
      }
      // Compute vanished mid-pause (node loss): a complete pending snapshot is the best copy.
      const promoted = head && pendingTag ? await this.snapshotFromTag(pendingTag, head.digest) : undefined;
      if (promoted) return this.release(await this.put({ ...rec, state: "paused", snapshot: promoted, pending: undefined }));
      if (rec.snapshot) return this.release(await this.put({ ...rec, state: "paused", pending: undefined }));
      log.error("pause was interrupted and the compute is gone without a snapshot; the sandbox's data is lost");
      await this.o.store.delete(id);
      return undefined;
    }
    if (rec.state === "paused" && !rec.computeReleased) {
      log.info("pause was recorded but compute not yet released; releasing");
      return this.release(rec);
    }
    if (rec.state === "resuming") {
      log.warn("resume was interrupted; discarding the half-restored compute, the snapshot is intact");
      await this.o.backend.releaseCompute?.(id);
      return this.put({ ...rec, state: "paused", computeReleased: true });
    }
    return rec;
  }

  /** A pause or resume another live process is driving: not ours to finish or undo. */
  private refuseForeignInFlight(rec: SnapshotRecord): void {
    const grace = this.o.inFlightGraceMs;
    if (!grace || (rec.state !== "pausing" && rec.state !== "resuming") || !rec.holder || rec.holder === this.o.holder) return;
    const ageMs = this.o.clock.now().getTime() - Date.parse(rec.updatedAt);
    if (ageMs >= grace) return;
    const doing = rec.state === "pausing" ? "paused" : "resumed";
    throw new ConflictError(
      `sandbox ${rec.id} is being ${doing} by runtime replica ${rec.holder} (its last step was ${Math.round(ageMs / 1000)} s ago); ` +
        `retry when it finishes, or after ${Math.round(grace / 1000)} s if that replica died`,
      { id: rec.id, holder: rec.holder },
    );
  }

  private async snapshotFromTag(tag: string, digest: string): Promise<SnapshotInfo | undefined> {
    const { manifest } = await this.o.oci.getManifest(this.o.repository, digest);
    const layers = readSnapshotLayers(manifest);
    if (typeof layers === "string" || layers.length !== this.paths.length) return undefined;
    const info: SnapshotInfo = {
      repository: this.o.repository,
      tag,
      ref: `${this.o.oci.base.host}/${this.o.repository}@${digest}`,
      digest,
      sizeBytes: layers.reduce((n, l) => n + l.size, 0),
      createdAt: manifest.annotations?.["org.opencontainers.image.created"] ?? this.o.clock.now().toISOString(),
      layers,
    };
    return (await verifySnapshot(this.o.oci, info)) ? undefined : info;
  }

  private async dropSnapshot(s: SnapshotInfo): Promise<void> {
    await this.o.oci.deleteManifest(s.repository, s.digest).catch((err: unknown) =>
      this.o.logger.warn({ op: "snapshot-gc", snapshot: s.ref, err }, "deleting a superseded snapshot failed; retention removes it later"),
    );
  }

  private async deleteTag(tag: string): Promise<void> {
    const head = await this.o.oci.headManifest(this.o.repository, tag);
    if (head) await this.o.oci.deleteManifest(this.o.repository, head.digest);
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

  /** One operation per sandbox at a time, in call order. */
  private serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(id, fn);
  }
}

function share<T>(map: Map<string, Promise<T>>, id: string, start: () => Promise<T>): Promise<T> {
  const existing = map.get(id);
  if (existing) return existing;
  const p = start().finally(() => map.delete(id));
  map.set(id, p);
  return p;
}
