// The local Backend: real Linux sandboxes on this machine (bubblewrap + cgroups + a tiny helper
// as each sandbox's PID 1). See docs/local-backend.md for the isolation model and its limits.
// Over 400 lines (415): one class with exactly Backend's members, each a short call into the part
// that does the work; readResources (issue 32) tipped it over. Next to split out: its body, into
// resources.ts beside the cgroup reader it calls.
import fs from "node:fs";
import path from "node:path";
import { type Duplex, Readable } from "node:stream";
import type { RuntimeConfig } from "../config/schema.ts";
import { catalogFrom, type ImageLookup } from "../core/catalog.ts";
import type { Clock } from "../core/clock.ts";
import { ConflictError, TimeoutError, ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type {
  Backend,
  ComputeRelease,
  ExecRequest,
  ExecSession,
  LogOptions,
  MetadataPatch,
  ResourceReading,
  Sandbox,
  SandboxEvent,
  SandboxSpec,
  WaitOptions,
} from "../core/types.ts";
import { archiveIn, archiveOut } from "./archive.ts";
import { detectCgroups, listSandboxKeys, removeRootIfEmpty } from "./cgroups.ts";
import { execInSlot } from "./exec.ts";
import { ensureHelperBinary } from "./helperBinary.ts";
import { claimStateDir, findBwrap, hostEtc, hostTopLevel } from "./host.ts";
import { ImageStore } from "./images.ts";
import { followFile, readTail } from "./logs.ts";
import { helperPort } from "./port.ts";
import {
  cgroupRootName,
  newSlotKey,
  type SandboxRecord,
  uidBlockBase,
  writeRecord,
  writeRecordOrLog,
  writeRecordSync,
  writeRecordSyncOrLog,
} from "./records.ts";
import { cleanCgroups, recoverSlots } from "./recovery.ts";
import { readSandboxResources } from "./resources.ts";
import type { Slot, SlotEnv } from "./slot.ts";
import { SlotTable } from "./slotTable.ts";
import { sandboxFor, specFromRecord } from "./specs.ts";
import { WarmPool } from "./warmPool.ts";
import { within } from "./within.ts";
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

export class LocalBackend implements Backend {
  readonly name = "local";
  private readonly stateDir: string;
  private readonly images: ImageStore;
  private readonly workspaces: WorkspaceStore;
  private env?: SlotEnv;
  /** every slot this process knows: warm, claimed, and dead-but-not-deleted ones (slotTable.ts) */
  private readonly slots: SlotTable;
  private readonly pool: WarmPool<Slot>;
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
    this.catalog = catalogFrom(config, deps.logger, deps.catalog);
    this.pool = new WarmPool<Slot>(config.warmPool, {
      startSlot: (profile, size) => this.startWarmSlot(profile, size),
      onError: (err, t) =>
        deps.logger.error(
          { op: "warm-pool", profile: t.profile, size: t.size, err: err.message },
          "warm slot failed to start",
        ),
    });
    this.slots = new SlotTable({
      logger: deps.logger,
      clock: deps.clock,
      uidBase: uidBlockBase(this.stateDir),
      pool: this.pool,
      layout: () => this.env?.layout,
      closed: () => this.closed,
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
      hostEtc: hostEtc(),
      workspaces: this.workspaces,
    };
    await recoverSlots({
      stateDir: this.stateDir,
      env: this.env,
      slots: this.slots,
      pool: this.pool,
      workspaces: this.workspaces,
      logger: this.deps.logger,
      clock: this.deps.clock,
    });
    this.deps.logger.info(
      { op: "start", cgroup: layout.version, stateDir: this.stateDir, sandboxes: this.slots.byId.size },
      "local backend started",
    );
    this.pool.refill();
  }

  async claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    this.requireStarted();
    if (this.slots.byId.has(spec.id)) throw new ConflictError(`sandbox ${spec.id} already exists`, { id: spec.id });
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
    this.slots.byId.set(spec.id, slot);
    await writeRecord(slot.paths, slot.rec);
    this.slots.armTtl(slot);
    this.slots.emit(slot);
    return { ...slot.rec.sandbox };
  }

  async provision(spec: SandboxSpec): Promise<Sandbox> {
    const env = this.requireStarted();
    if (this.slots.byId.has(spec.id)) throw new ConflictError(`sandbox ${spec.id} already exists`, { id: spec.id });
    const rootfs = await this.images.resolve(spec.image.profile, spec.image.image);
    const rec: SandboxRecord = {
      version: 1,
      key: newSlotKey(),
      uid: this.slots.allocateUid(),
      image: spec.image,
      rootfs,
      size: spec.size,
      env: { ...spec.env },
    };
    rec.sandbox = sandboxFor(spec, false);
    const slot = await this.slots.launch(env, rec, spec.id);
    this.slots.armTtl(slot);
    this.slots.emit(slot);
    slot.ready.then(
      () => {
        if (!rec.sandbox || slot.state !== "ready") return;
        rec.sandbox = { ...rec.sandbox, phase: "Running", ready: true, readyAt: this.deps.clock.now().toISOString() };
        // on disk before awaitReady resolves: a crash right after must still find the helper's pid
        writeRecordSyncOrLog(slot.paths, rec, this.deps.logger, "ready");
        this.slots.emit(slot);
      },
      () => {},
    );
    return { ...rec.sandbox };
  }

  async awaitReady(id: string, opts: WaitOptions): Promise<Sandbox> {
    const slot = this.slots.get(id);
    const sb = () => ({ ...slot.rec.sandbox! });
    if (slot.state === "ready" && sb().ready) return sb();
    if (slot.state === "dead") throw this.slots.failed(slot);
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
      if ((slot.state as string) === "dead") throw this.slots.failed(slot);
      throw err;
    }
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    const slot = this.usable(id);
    return execInSlot(this.env!.layout, slot, id, req, () => this.slots.failed(slot), this.deps.logger);
  }

  async putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    const slot = this.usable(id);
    await archiveIn(
      (req) => execInSlot(this.env!.layout, slot, id, req, () => this.slots.failed(slot), this.deps.logger),
      dir,
      tar,
    );
  }

  async getArchive(id: string, p: string): Promise<Readable> {
    const slot = this.usable(id);
    return archiveOut(
      (req) => execInSlot(this.env!.layout, slot, id, req, () => this.slots.failed(slot), this.deps.logger),
      p,
    );
  }

  /** A TCP connection to `port` on the sandbox's own loopback, through its helper (port.ts). */
  async openPort(id: string, port: number): Promise<Duplex> {
    return helperPort(this.usable(id).paths.socket, id, port);
  }

  async logs(id: string, opts: LogOptions): Promise<Readable> {
    const slot = this.slots.get(id);
    if (opts.follow)
      return followFile(slot.paths.log, opts.tailLines, () => slot.state === "dead" || !this.slots.byId.has(id));
    return Readable.from([await readTail(slot.paths.log, opts.tailLines)]);
  }

  delete(id: string): Promise<void> {
    return this.slots.remove(id);
  }

  async describe(id: string): Promise<Sandbox | undefined> {
    const sb = this.slots.byId.get(id)?.rec.sandbox;
    return sb && { ...sb };
  }

  async list(): Promise<Sandbox[]> {
    return [...this.slots.byId.values()].map((s) => ({ ...s.rec.sandbox! }));
  }

  /** The create-time spec from the slot record, env included (a resume starts from it). */
  async specOf(id: string): Promise<SandboxSpec | undefined> {
    const rec = this.slots.byId.get(id)?.rec;
    return rec ? specFromRecord(id, rec, this.config.defaults.idleTimeoutSeconds) : undefined;
  }

  async touch(id: string, at: Date): Promise<void> {
    const slot = this.slots.byId.get(id);
    if (!slot?.rec.sandbox) return;
    slot.rec.sandbox.lastActivityAt = at.toISOString();
    // touches come with every API call: persist at most one pending write per sandbox
    if (this.touchPending.has(id)) return;
    this.touchPending.add(id);
    setTimeout(() => {
      this.touchPending.delete(id);
      if (this.slots.byId.get(id) === slot)
        void writeRecordOrLog(slot.paths, slot.rec, this.deps.logger, "last activity");
    }, TOUCH_PERSIST_MS).unref();
  }

  /** Written synchronously: the record holds the change before anyone is told it happened. */
  async updateMetadata(id: string, patch: MetadataPatch): Promise<Sandbox> {
    const slot = this.slots.get(id);
    const sb = slot.rec.sandbox!;
    const before = sb.metadata;
    const metadata = { ...before };
    for (const [k, v] of Object.entries(patch)) {
      if (v === null) delete metadata[k];
      else metadata[k] = v;
    }
    sb.metadata = metadata;
    try {
      writeRecordSync(slot.paths, slot.rec);
    } catch (err) {
      sb.metadata = before; // not on disk, so not done: a restart would not see it either
      throw err;
    }
    return { ...sb };
  }

  /** Every running sandbox's cgroup and workspace figures (resources.ts); one that ended meanwhile is left out. */
  async readResources(): Promise<ResourceReading[]> {
    const layout = this.env?.layout;
    if (!layout || this.closed) return [];
    const live = [...this.slots.byId.values()].filter((s) => s.state === "ready" && s.rec.sandbox?.ready);
    const read = await Promise.all(
      live.map((slot) =>
        readSandboxResources(layout, {
          id: slot.rec.sandbox!.id,
          owner: slot.rec.sandbox!.owner,
          dirs: slot.dirs,
          helperPid: slot.rec.helperPid,
          cpuLimitMillis: slot.rec.size.cpuLimitMillis,
          memoryLimitBytes: slot.rec.size.memoryLimitBytes,
          pidsLimit: slot.rec.size.pids,
          workspaceBytes: slot.rec.size.workspaceBytes,
        }).then(
          (r) => (slot.state === "ready" ? r : undefined),
          (err: Error) => {
            this.deps.logger.warn(
              { sandbox: slot.rec.sandbox?.id, op: "resources", err: err.message },
              "reading the sandbox's resources failed; it is read again next tick",
            );
            return undefined;
          },
        ),
      ),
    );
    return read.filter((r): r is ResourceReading => r !== undefined);
  }

  subscribe(listener: (event: SandboxEvent) => void): () => void {
    return this.slots.subscribe(listener);
  }

  /** Stops every sandbox (nothing keeps running); claimed ones stay listed as Failed/Shutdown. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.pool.close();
    this.slots.disarmAll();
    await Promise.all(
      [...this.slots.byKey.values()].map(async (slot) => {
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
      for (const key of listSandboxKeys(this.env.layout)) await cleanCgroups(this.env.layout, key);
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

  private usable(id: string): Slot {
    this.requireStarted();
    const slot = this.slots.get(id);
    if (slot.state === "dead") throw this.slots.failed(slot);
    if (slot.state !== "ready" || !slot.rec.sandbox?.ready)
      throw new ConflictError(`sandbox ${id} is not ready yet; wait for it first (awaitReady / sbx wait)`, { id });
    return slot;
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
      uid: this.slots.allocateUid(),
      image: { profile, image },
      rootfs,
      size,
      env: {},
    };
    const slot = await this.slots.launch(env, rec);
    await slot.ready;
    return slot;
  }
}
