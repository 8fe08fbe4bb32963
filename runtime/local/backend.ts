// The local Backend: real Linux sandboxes on this machine (bubblewrap + cgroups + a tiny helper
// as each sandbox's PID 1). See docs/local-backend.md for the isolation model and its limits.
import fs from "node:fs";
import path from "node:path";
import { Readable } from "node:stream";
import { catalogFrom, type ImageLookup } from "../core/catalog.ts";
import type { Clock } from "../core/clock.ts";
import { ConflictError, NotFoundError, SandboxFailedError, TimeoutError, ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type {
  Backend,
  ComputeRelease,
  ExecRequest,
  ExecSession,
  LogOptions,
  Sandbox,
  SandboxEvent,
  SandboxSpec,
  WaitOptions,
} from "../core/types.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import {
  detectCgroups,
  killCgroup,
  listSandboxKeys,
  oomKills,
  childDirs,
  removeCgroup,
  removeRootIfEmpty,
  sandboxDirs,
  type CgroupLayout,
} from "./cgroups.ts";
import { execInSlot } from "./exec.ts";
import { ensureHelperBinary } from "./helper-binary.ts";
import { ImageStore } from "./images.ts";
import { claimStateDir, findBwrap, hostTopLevel } from "./host.ts";
import { followFile, readTail } from "./logs.ts";
import {
  cgroupRootName,
  newSlotKey,
  readRecords,
  uidBlockBase,
  writeRecord,
  writeRecordOrLog,
  writeRecordSync,
  writeRecordSyncOrLog,
  type SandboxRecord,
} from "./records.ts";
import { planSlotRecovery, shouldProbeSlot } from "./recoveryPlan.ts";
import { sandboxFor, specFromRecord } from "./specs.ts";
import { within } from "./within.ts";
import { Slot, type SlotEnv } from "./slot.ts";
import { archiveIn, archiveOut } from "./archive.ts";
import { WarmPool } from "./warm-pool.ts";
import { WorkspaceStore } from "./workspaces.ts";

/** how long a touch may wait before it reaches the record on disk (only a crash loses it) */
const TOUCH_PERSIST_MS = 1000;

export interface LocalBackendDeps {
  logger: Logger;
  clock: Clock;
  /** the Manager's catalog (buildManager); else config.catalog + config.catalogPath read once */
  catalog?: ImageLookup;
}

export function createLocalBackend(config: RuntimeConfig, deps: LocalBackendDeps): Backend {
  return new LocalBackend(config, deps);
}

class LocalBackend implements Backend {
  readonly name = "local";
  private readonly stateDir: string;
  private readonly images: ImageStore;
  private readonly workspaces: WorkspaceStore;
  private env?: SlotEnv;
  /** every slot this process knows: warm, claimed, and dead-but-not-deleted ones */
  private readonly slots = new Map<string, Slot>();
  private readonly byId = new Map<string, Slot>();
  private readonly listeners = new Set<(e: SandboxEvent) => void>();
  private readonly ttls = new Map<string, AbortController>();
  private readonly pool: WarmPool<Slot>;
  private readonly uidBase: number;
  private readonly catalog: ImageLookup;
  private closed = false;
  private readonly touchPending = new Set<string>();
  /**
   * Pause/resume's capability. Exact here because a local delete removes nothing but the slot
   * (processes, workspace image, tmpfs): the identity lives in the pause/resume record.
   */
  readonly compute: ComputeRelease = {
    releaseCompute: (id) => this.delete(id),
    adopt: async (spec) => (await this.claim(spec)) ?? (await this.provision(spec)),
  };

  constructor(
    private readonly config: RuntimeConfig,
    private readonly deps: LocalBackendDeps,
  ) {
    this.stateDir = path.resolve(config.local.stateDir);
    this.images = new ImageStore(path.join(this.stateDir, "images"));
    this.workspaces = new WorkspaceStore(this.stateDir, deps.logger);
    this.uidBase = uidBlockBase(this.stateDir);
    this.catalog = catalogFrom(config, deps.logger, deps.catalog);
    this.pool = new WarmPool<Slot>(config.warmPool, {
      startSlot: (profile, size) => this.startWarmSlot(profile, size),
      onError: (err, t) =>
        deps.logger.error(
          { op: "warm-pool", profile: t.profile, size: t.size, err: err.message },
          "warm slot failed to start",
        ),
    });
  }

  async start(): Promise<void> {
    const helperPath = await ensureHelperBinary();
    const bwrapPath = findBwrap();
    const layout = detectCgroups(cgroupRootName(this.stateDir));
    fs.mkdirSync(path.join(this.stateDir, "sandboxes"), { recursive: true, mode: 0o711 });
    claimStateDir(this.stateDir);
    await this.workspaces.start();
    this.env = {
      stateDir: this.stateDir,
      layout,
      helperPath,
      bwrapPath,
      hostTopLevel: hostTopLevel(),
      workspaces: this.workspaces,
    };
    await this.recover(layout);
    this.deps.logger.info(
      { op: "start", cgroup: layout.version, stateDir: this.stateDir, sandboxes: this.byId.size },
      "local backend started",
    );
    this.pool.refill();
  }

  async claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    this.requireStarted();
    if (this.byId.has(spec.id)) throw new ConflictError(`sandbox ${spec.id} already exists`, { id: spec.id });
    const slot = this.pool.take(
      spec.image.profile,
      spec.size.name,
      (s) => s.state === "ready" && s.rec.image.image === spec.image.image,
    );
    if (!slot) return undefined;
    slot.rec.sandbox = {
      ...sandboxFor(spec, true),
      phase: "Running",
      ready: true,
      readyAt: this.deps.clock.now().toISOString(),
    };
    slot.rec.env = { ...spec.env };
    this.byId.set(spec.id, slot);
    await writeRecord(slot.paths, slot.rec);
    this.armTtl(slot);
    this.emit(slot);
    return { ...slot.rec.sandbox };
  }

  async provision(spec: SandboxSpec): Promise<Sandbox> {
    const env = this.requireStarted();
    if (this.byId.has(spec.id)) throw new ConflictError(`sandbox ${spec.id} already exists`, { id: spec.id });
    const rootfs = await this.images.resolve(spec.image.profile, spec.image.image);
    const rec: SandboxRecord = {
      version: 1,
      key: newSlotKey(),
      uid: this.allocateUid(),
      image: spec.image,
      rootfs,
      size: spec.size,
      env: { ...spec.env },
    };
    rec.sandbox = sandboxFor(spec, false);
    const slot = await this.launchSlot(env, rec, spec.id);
    this.armTtl(slot);
    this.emit(slot);
    slot.ready.then(
      () => {
        if (!rec.sandbox || slot.state !== "ready") return;
        rec.sandbox = { ...rec.sandbox, phase: "Running", ready: true, readyAt: this.deps.clock.now().toISOString() };
        // on disk before awaitReady resolves: a crash right after must still find the helper's pid
        writeRecordSyncOrLog(slot.paths, rec, this.deps.logger, "ready");
        this.emit(slot);
      },
      () => {},
    );
    return { ...rec.sandbox };
  }

  async awaitReady(id: string, opts: WaitOptions): Promise<Sandbox> {
    const slot = this.get(id);
    const sb = () => ({ ...slot.rec.sandbox! });
    if (slot.state === "ready" && sb().ready) return sb();
    if (slot.state === "dead") throw this.failed(slot);
    try {
      await within(
        slot.ready,
        opts,
        () =>
          new TimeoutError(
            `sandbox ${id} was not ready within ${opts.timeoutMs} ms; raise the wait timeout or check its logs (sbx logs ${id})`,
          ),
      );
      // the ready handler in provision() runs first (registered earlier), so the record is current
      await Promise.resolve();
      return sb();
    } catch (err) {
      if ((slot.state as string) === "dead") throw this.failed(slot);
      throw err;
    }
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    const slot = this.usable(id);
    return execInSlot(this.env!.layout, slot, id, req, () => this.failed(slot));
  }

  async putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    const slot = this.usable(id);
    await archiveIn((req) => execInSlot(this.env!.layout, slot, id, req, () => this.failed(slot)), dir, tar);
  }

  async getArchive(id: string, p: string): Promise<Readable> {
    const slot = this.usable(id);
    return archiveOut((req) => execInSlot(this.env!.layout, slot, id, req, () => this.failed(slot)), p);
  }

  async logs(id: string, opts: LogOptions): Promise<Readable> {
    const slot = this.get(id);
    if (opts.follow)
      return followFile(slot.paths.log, opts.tailLines, () => slot.state === "dead" || !this.byId.has(id));
    return Readable.from([await readTail(slot.paths.log, opts.tailLines)]);
  }

  async delete(id: string): Promise<void> {
    const slot = this.byId.get(id);
    if (!slot) return;
    const owner = slot.rec.sandbox!.owner;
    this.ttls.get(slot.rec.key)?.abort();
    this.ttls.delete(slot.rec.key);
    await slot.destroy();
    this.byId.delete(id);
    this.slots.delete(slot.rec.key);
    for (const l of this.listeners) l({ type: "delete", id, owner });
  }

  async describe(id: string): Promise<Sandbox | undefined> {
    const sb = this.byId.get(id)?.rec.sandbox;
    return sb && { ...sb };
  }

  async list(): Promise<Sandbox[]> {
    return [...this.byId.values()].map((s) => ({ ...s.rec.sandbox! }));
  }

  /** The create-time spec from the slot record, env included (a resume starts from it). */
  async specOf(id: string): Promise<SandboxSpec | undefined> {
    const rec = this.byId.get(id)?.rec;
    return rec ? specFromRecord(id, rec, this.config.defaults.idleTimeoutSeconds) : undefined;
  }

  async touch(id: string, at: Date): Promise<void> {
    const slot = this.byId.get(id);
    if (!slot?.rec.sandbox) return;
    slot.rec.sandbox.lastActivityAt = at.toISOString();
    // touches come with every API call: persist at most one pending write per sandbox
    if (this.touchPending.has(id)) return;
    this.touchPending.add(id);
    setTimeout(() => {
      this.touchPending.delete(id);
      if (this.byId.get(id) === slot) void writeRecordOrLog(slot.paths, slot.rec, this.deps.logger, "last activity");
    }, TOUCH_PERSIST_MS).unref();
  }

  subscribe(listener: (event: SandboxEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Stops every sandbox (nothing keeps running); claimed ones stay listed as Failed/Shutdown. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.pool.close();
    for (const c of this.ttls.values()) c.abort();
    await Promise.all(
      [...this.slots.values()].map(async (slot) => {
        if (!slot.rec.sandbox) return slot.destroy();
        const wasAlive = slot.state !== "dead";
        await slot.stop();
        if (wasAlive) {
          slot.rec.sandbox = {
            ...slot.rec.sandbox,
            phase: "Failed",
            ready: false,
            reason: "Shutdown",
            message: "the local backend stopped; the workspace is kept until the sandbox is deleted",
          };
          await writeRecordOrLog(slot.paths, slot.rec, this.deps.logger, "stopped at shutdown");
        }
      }),
    );
    if (this.env) {
      for (const key of listSandboxKeys(this.env.layout)) await this.cleanCgroups(this.env.layout, key);
      removeRootIfEmpty(this.env.layout);
    }
    await this.workspaces.close();
    const pidFile = path.join(this.stateDir, "backend.pid");
    if (fs.existsSync(pidFile) && fs.readFileSync(pidFile, "utf8").trim() === String(process.pid)) fs.rmSync(pidFile);
  }

  // ---- internals -------------------------------------------------------------------------------

  private requireStarted(): SlotEnv {
    if (!this.env) throw new ConflictError("the local backend is not started; call start() first");
    if (this.closed) throw new ConflictError("the local backend is closed");
    return this.env;
  }

  private get(id: string): Slot {
    const slot = this.byId.get(id);
    if (!slot) throw new NotFoundError("sandbox", id);
    return slot;
  }

  private usable(id: string): Slot {
    this.requireStarted();
    const slot = this.get(id);
    if (slot.state === "dead") throw this.failed(slot);
    if (slot.state !== "ready" || !slot.rec.sandbox?.ready)
      throw new ConflictError(`sandbox ${id} is not ready yet; wait for it first (awaitReady / sbx wait)`, { id });
    return slot;
  }

  private failed(slot: Slot): SandboxFailedError {
    const sb = slot.rec.sandbox;
    return new SandboxFailedError(
      sb?.id ?? slot.rec.key,
      sb?.reason ?? slot.deathReason ?? "Error",
      sb?.message ?? slot.deathMessage,
    );
  }

  private allocateUid(): number {
    const used = new Set([...this.slots.values()].map((s) => s.rec.uid));
    for (let i = 0; i < 65_536; i++) if (!used.has(this.uidBase + i)) return this.uidBase + i;
    throw new ConflictError(
      "local backend: all 65536 sandbox uids of this state directory are in use; delete sandboxes first",
    );
  }

  private armTtl(slot: Slot): void {
    const sb = slot.rec.sandbox!;
    const ctl = new AbortController();
    this.ttls.set(slot.rec.key, ctl);
    const ms = Math.max(0, Date.parse(sb.expiresAt) - this.deps.clock.now().getTime());
    this.deps.clock.sleep(ms, ctl.signal).then(
      () => {
        if (slot.state === "dead") return;
        slot.deathReason = "DeadlineExceeded";
        slot.deathMessage = `the sandbox reached its time to live (expired at ${sb.expiresAt})`;
        this.deps.logger.info({ sandbox: sb.id, owner: sb.owner, op: "ttl" }, "sandbox expired");
        void slot.stop();
      },
      () => {},
    );
  }

  /** A slot's helper is gone: decide why, release its processes and cgroups, tell subscribers. */
  private onDeath(slot: Slot): void {
    const sb = slot.rec.sandbox;
    this.pool.remove(slot);
    if (!sb) {
      this.slots.delete(slot.rec.key);
      if (!slot.stopping) void slot.destroy();
      return;
    }
    if (this.closed || !this.byId.has(sb.id) || (slot.stopping && !slot.deathReason)) return;
    const oom = this.env && oomKills(this.env.layout, childDirs(slot.dirs, "init")) > 0;
    const reason = slot.deathReason ?? (oom ? "OOMKilled" : "Error");
    const message =
      slot.deathMessage ??
      (oom
        ? "the sandbox's init was killed for exceeding its memory limit"
        : `the sandbox's init exited unexpectedly: ${slot.logTail(2)}`);
    slot.rec.sandbox = { ...sb, phase: "Failed", ready: false, reason, message };
    this.deps.logger.warn({ sandbox: sb.id, owner: sb.owner, reason }, "sandbox stopped");
    if (!slot.stopping) void slot.stop();
    void writeRecordOrLog(slot.paths, slot.rec, this.deps.logger, `failed: ${reason}`);
    this.emit(slot);
  }

  private emit(slot: Slot): void {
    const sandbox = slot.rec.sandbox;
    if (!sandbox) return;
    for (const l of this.listeners) l({ type: "upsert", sandbox: { ...sandbox } });
  }

  private async startWarmSlot(profile: string, sizeName: string): Promise<Slot> {
    const env = this.requireStarted();
    const size = this.config.sizeClasses[sizeName];
    const image = this.catalog.imageOf(profile);
    if (!size || !image)
      throw new ValidationError(
        "config.warmPool",
        { profile, size: sizeName },
        `profile must be in the catalog (config.catalog or catalogPath) and size in config.sizeClasses`,
      );
    const rootfs = await this.images.resolve(profile, image);
    const rec: SandboxRecord = {
      version: 1,
      key: newSlotKey(),
      uid: this.allocateUid(),
      image: { profile, image },
      rootfs,
      size,
      env: {},
    };
    const slot = await this.launchSlot(env, rec);
    await slot.ready;
    return slot;
  }

  /** Prepares, records and launches a new slot (known by `id` when it is a sandbox); a failed step destroys and forgets it. */
  private async launchSlot(env: SlotEnv, rec: SandboxRecord, id?: string): Promise<Slot> {
    const slot = new Slot(env, rec);
    this.slots.set(rec.key, slot);
    if (id) this.byId.set(id, slot);
    slot.onDeath(() => this.onDeath(slot));
    try {
      await slot.prepare();
      // synchronous: a few hundred bytes, and the thread pool is slow to get to on a busy host
      writeRecordSync(slot.paths, rec);
      slot.launch();
    } catch (err) {
      await slot.destroy();
      this.slots.delete(rec.key);
      if (id) this.byId.delete(id);
      throw err;
    }
    return slot;
  }

  /**
   * After a restart: adopt sandboxes whose helper still answers, clean up the rest. Each slot's
   * fate is planned from its record and whether its helper answers (recoveryPlan.ts); this only
   * observes and applies.
   */
  private async recover(layout: CgroupLayout): Promise<void> {
    const env = this.env!;
    for (const { key, record, error } of readRecords(this.stateDir, this.deps.logger)) {
      const slot = record && this.adoptSlot(env, key, record);
      const alive =
        !!slot &&
        shouldProbeSlot(record!) &&
        (await slot.attach().then(
          () => true,
          () => false,
        ));
      const plan = planSlotRecovery(record, { alive }, this.deps.clock.now());
      if (plan.action === "remove" || !slot || !record) {
        this.deps.logger.warn(
          { op: "recover", key, err: error },
          "removing a sandbox directory without a readable record",
        );
        await this.cleanCgroups(layout, key);
        await this.workspaces.remove(path.join(this.stateDir, "sandboxes", key));
        continue;
      }
      if (plan.action === "offer-to-pool" || plan.action === "destroy") {
        if (plan.action === "destroy" || !this.pool.adopt(record.image.profile, record.size.name, slot))
          await slot.destroy();
        continue;
      }
      this.byId.set(record.sandbox!.id, slot);
      if (plan.action === "adopt") {
        if (plan.sandbox) {
          record.sandbox = plan.sandbox;
          await writeRecord(slot.paths, record);
        }
        this.armTtl(slot);
        continue;
      }
      await slot.stop();
      if (plan.action === "mark-lost") {
        record.sandbox = plan.sandbox;
        await writeRecord(slot.paths, record);
      }
    }
    for (const key of listSandboxKeys(layout)) if (!this.slots.has(key)) await this.cleanCgroups(layout, key);
  }

  /** A Slot object for a directory a previous process left, known and watched from now on. */
  private adoptSlot(env: SlotEnv, key: string, record: SandboxRecord): Slot {
    const slot = new Slot(env, record);
    this.slots.set(key, slot);
    slot.onDeath(() => this.onDeath(slot));
    return slot;
  }

  private async cleanCgroups(layout: CgroupLayout, key: string): Promise<void> {
    const dirs = sandboxDirs(layout, key);
    await killCgroup(layout, dirs);
    for (let i = 0; i < 200 && !removeCgroup(dirs); i++) await new Promise((r) => setTimeout(r, 5));
  }
}
