// The Manager: all sandbox policy on top of a Backend. It keeps no database: the substrate is
// the source of truth; the only in-process state is the admission budget (rebuilt from the
// substrate at start and reconciled by the reaper) and the creates in flight.
import { Maintenance, type MaintenanceTask } from "./maintenance.ts";
import type { Readable } from "node:stream";
import type { RuntimeConfig } from "../config/schema.ts";
import { Admission, holdsCapacity } from "./admission.ts";
import type { AuditEntry, AuditOp, AuditStore } from "./audit.ts";
import type { ImageCatalog } from "./catalog.ts";
import type { Clock } from "./clock.ts";
import { CapacityError, ConflictError, NotFoundError, SbxError, ValidationError } from "./errors.ts";
import type { Logger } from "./log.ts";
import { KeyedQueue } from "./keyed-queue.ts";
import { errorCode, Metrics, observed, secondsSince } from "./metrics.ts";
import { ProgressFanout } from "./progress-fanout.ts";
import { Reaper } from "./reaper.ts";
import { resolveSpec, validateOwner } from "./spec.ts";
import {
  TERMINAL_PHASES,
  type Backend,
  type CreateRequest,
  type ExecRequest,
  type ExecSession,
  type ListFilter,
  type LogOptions,
  type Manager,
  type PoolStatus,
  type Sandbox,
  type SandboxEvent,
  type SandboxSpec,
  type TransferOptions,
  type WaitOptions,
} from "./types.ts";

export interface ManagerDeps {
  backend: Backend;
  config: RuntimeConfig;
  catalog: ImageCatalog;
  audit: AuditStore;
  clock: Clock;
  logger: Logger;
  admission?: Admission;
  /** write Backend.touch at most this often per sandbox (Kubernetes stores it on the object) */
  touchIntervalMs?: number;
  reaperIntervalMs?: number;
  /** collect Node process metrics in the registry (off in tests that build many managers) */
  processMetrics?: boolean;
  /** periodic jobs run while the manager is started (e.g. expiring old snapshots) */
  maintenance?: MaintenanceTask[];
}

/** How long an id we released stays barred from being re-adopted by a late event. */
const GONE_MEMORY_MS = 10 * 60_000;
/** sandbox metadata that turns automatic resume off ("false"); shared with runtime/snapshot */
const AUTO_RESUME_KEY = "sbx.auto-resume";

export class SandboxManager implements Manager {
  readonly admission: Admission;
  readonly metrics: Metrics;
  readonly reaper: Reaper;
  private readonly creating = new Map<string, Promise<Sandbox>>();
  private readonly lastTouch = new Map<string, number>();
  private readonly gone = new Map<string, number>();
  /** per-sandbox idle timeouts from create, for backends whose Sandbox does not carry them */
  private readonly idleTimeouts = new Map<string, number>();
  private lastList: readonly Sandbox[] = [];
  private unsubscribe?: () => void;
  private readonly log: Logger;
  private readonly maintenance: Maintenance;
  /** pause and resume of one sandbox, one at a time (their admission changes must not interleave) */
  private readonly transitions = new KeyedQueue();
  /** a call queued behind another pause/resume of the sandbox watches that one's bytes too */
  private readonly progress = new ProgressFanout();

  constructor(private readonly deps: ManagerDeps) {
    const { config } = deps;
    this.admission = deps.admission ?? new Admission(config.budget);
    this.log = deps.logger;
    this.maintenance = new Maintenance({ tasks: deps.maintenance ?? [], clock: deps.clock, logger: deps.logger });
    this.metrics = new Metrics({ admission: () => this.admission.usage(), sandboxes: () => this.lastList }, { defaultMetrics: deps.processMetrics ?? false });
    this.reaper = new Reaper({
      backend: deps.backend,
      admission: this.admission,
      audit: deps.audit,
      clock: deps.clock,
      logger: deps.logger,
      config: { idleTimeoutSeconds: config.defaults.idleTimeoutSeconds, finishedGraceSeconds: config.defaults.finishedGraceSeconds },
      inFlight: () => new Set(this.creating.keys()),
      onList: (all) => (this.lastList = all),
      onReap: (a) => {
        this.metrics.reaped.inc({ reason: a.reason });
        this.forget(a.id);
      },
      idleTimeoutFor: (id) => this.idleTimeouts.get(id),
      intervalMs: deps.reaperIntervalMs,
    });
    // a backend that wakes paused sandboxes on its own does it through resume(), past admission
    deps.backend.routeAutoResume?.((id, op) => this.autoResume(id, op));
  }

  get backendName(): string {
    return this.deps.backend.name;
  }

  /** Start the backend, rebuild the budget from what is live, follow events, start the reaper. */
  async start(opts: { reaper?: boolean; maintenance?: boolean } = {}): Promise<void> {
    const { backend } = this.deps;
    this.deps.catalog.start();
    await backend.start();
    this.unsubscribe = backend.subscribe((e) => this.onEvent(e));
    const live = await backend.list();
    this.lastList = live;
    const { adopted } = this.admission.rebuild(live, new Set(this.creating.keys()));
    this.log.info({ op: "start", backend: backend.name, live: live.length, adopted: adopted.length, budget: this.admission.usage() }, "manager started; admission budget rebuilt from live sandboxes");
    if (opts.reaper ?? true) this.reaper.start();
    if (opts.maintenance ?? opts.reaper ?? true) this.maintenance.start();
  }

  async close(): Promise<void> {
    await this.maintenance.stop();
    await this.reaper.stop();
    this.unsubscribe?.();
    this.deps.catalog.close();
    await this.deps.backend.close();
    await this.deps.audit.close();
  }

  async create(req: CreateRequest): Promise<Sandbox> {
    const t0 = process.hrtime.bigint();
    let spec: SandboxSpec;
    try {
      spec = resolveSpec(req, this.deps.config, (p) => this.deps.catalog.resolve(p), this.deps.clock.now());
    } catch (err) {
      this.audit("create", String(req.owner), undefined, err);
      throw err;
    }
    if (spec.autoPause && !this.deps.backend.pause) {
      const err = new ValidationError("autoPause", "(policy)", "this service cannot pause sandboxes: configure snapshots.registry, or create without autoPause");
      this.audit("create", spec.owner, undefined, err);
      throw err;
    }
    // Same (owner, clientKey) => same id: concurrent retries in this process share one create.
    const pending = this.creating.get(spec.id);
    if (pending) return pending;
    const p = this.doCreate(spec, t0);
    this.creating.set(spec.id, p);
    try {
      return await p;
    } finally {
      this.creating.delete(spec.id);
    }
  }

  private async doCreate(spec: SandboxSpec, t0: bigint): Promise<Sandbox> {
    const { backend } = this.deps;
    const log = this.log.child({ sandbox: spec.id, owner: spec.owner, op: "create" });
    let path = "cold";
    try {
      if (spec.clientKey !== undefined) {
        const existing = await backend.describe(spec.id);
        if (existing) {
          path = "existing";
          this.metrics.createAccept.observe({ outcome: "ok", path }, secondsSince(t0));
          return this.sameOwner(existing, spec.owner);
        }
      }
      try {
        this.admission.admit(spec);
      } catch (err) {
        if (err instanceof CapacityError) this.metrics.admissionRejects.inc();
        throw err;
      }
      this.gone.delete(spec.id);
      let sandbox: Sandbox;
      try {
        sandbox = (await this.claim(spec)) ?? (await this.provision(spec));
        if (sandbox.warm) path = "warm";
      } catch (err) {
        this.admission.release(spec.id);
        // Another replica (or a restarted us) created this keyed sandbox first: that is the answer.
        if (err instanceof ConflictError && spec.clientKey !== undefined) {
          const existing = await backend.describe(spec.id);
          if (existing) {
            path = "existing";
            return this.sameOwner(existing, spec.owner);
          }
        }
        throw err;
      }
      this.idleTimeouts.set(sandbox.id, spec.idleTimeoutSeconds);
      if (sandbox.id !== spec.id) {
        // A backend that hands out its own ids: move the reservation to the id callers will use.
        this.admission.release(spec.id);
        this.admission.adopt(sandbox);
      }
      this.audit("create", spec.owner, sandbox.id, undefined, { profile: spec.image.profile, size: spec.size.name, path });
      log.info({ path, phase: sandbox.phase }, "sandbox accepted");
      this.metrics.createAccept.observe({ outcome: "ok", path }, secondsSince(t0));
      return sandbox;
    } catch (err) {
      this.audit("create", spec.owner, spec.id, err, { profile: spec.image.profile, size: spec.size.name });
      this.metrics.createAccept.observe({ outcome: errorCode(err), path }, secondsSince(t0));
      if (!(err instanceof SbxError) || err.code === "upstream") log.error({ err }, "create failed");
      throw err;
    }
  }

  private async claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    const s = await observed(this.metrics.claim, () => this.deps.backend.claim(spec), (r) => (r ? "hit" : "miss"), () => "error");
    return s ? { ...s, warm: true } : undefined;
  }

  private provision(spec: SandboxSpec): Promise<Sandbox> {
    return observed(this.metrics.provision, () => this.deps.backend.provision(spec));
  }

  async wait(owner: string, id: string, opts: WaitOptions): Promise<Sandbox> {
    await this.usable(owner, id);
    return observed(this.metrics.wait, () => this.deps.backend.awaitReady(id, opts));
  }

  async exec(owner: string, id: string, req: ExecRequest): Promise<ExecSession> {
    const details = { command: req.command };
    try {
      await this.usable(owner, id);
      const t0 = process.hrtime.bigint();
      const session = await this.deps.backend.exec(id, req);
      this.audit("exec", owner, id, undefined, details);
      session.result.then(
        (r) => this.metrics.exec.observe({ outcome: r.timedOut ? "timeout" : "ok" }, secondsSince(t0)),
        (err) => {
          this.metrics.exec.observe({ outcome: errorCode(err) }, secondsSince(t0));
          this.log.warn({ sandbox: id, owner, op: "exec", err }, "exec ended with an error");
        },
      );
      return session;
    } catch (err) {
      this.audit("exec", owner, id, err, details);
      throw err;
    }
  }

  async putArchive(owner: string, id: string, dir: string, tar: Readable): Promise<void> {
    try {
      await this.usable(owner, id);
      await this.deps.backend.putArchive(id, dir, tar);
      this.audit("put", owner, id, undefined, { dir });
    } catch (err) {
      // when the upload itself failed (over the size limit, client gone), that is the cause,
      // whatever the unpacking reported after its input broke
      const cause = tar.errored instanceof SbxError ? tar.errored : err;
      tar.destroy();
      this.audit("put", owner, id, cause, { dir });
      throw cause;
    }
  }

  async getArchive(owner: string, id: string, path: string): Promise<Readable> {
    await this.usable(owner, id);
    return this.deps.backend.getArchive(id, path);
  }

  async logs(owner: string, id: string, opts: LogOptions): Promise<Readable> {
    await this.usable(owner, id);
    return this.deps.backend.logs(id, opts);
  }

  async get(owner: string, id: string): Promise<Sandbox> {
    return this.owned(owner, id);
  }

  async list(filter: ListFilter): Promise<Sandbox[]> {
    const owner = validateOwner(filter.owner);
    const all = await this.deps.backend.list();
    return all.filter((s) => s.owner === owner).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  async kill(owner: string, id: string): Promise<void> {
    try {
      await this.owned(owner, id, { touch: false });
      await this.deps.backend.delete(id);
      this.admission.release(id);
      this.forget(id);
      this.audit("kill", owner, id);
    } catch (err) {
      this.audit("kill", owner, id, err);
      throw err;
    }
  }

  /**
   * Snapshot and release the compute; the sandbox's reservation returns to admission. Pause and
   * resume of one sandbox run one after the other, so their admission changes never interleave.
   */
  async pause(owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    const { backend } = this.deps;
    const unlisten = this.progress.add(id, "pause", opts.onProgress);
    try {
      return await this.transitions.run(id, async () => {
        await this.owned(owner, id);
        if (!backend.pause) throw new ConflictError(`pause: the ${backend.name} backend does not support pause; kill the sandbox instead`);
        const s = await backend.pause(id, { onProgress: this.progress.sink(id) });
        this.admission.release(id); // a paused sandbox holds no compute
        this.audit("pause", owner, id);
        return s;
      });
    } catch (err) {
      this.audit("pause", owner, id, err);
      throw err;
    } finally {
      unlisten();
    }
  }

  /** Restore a paused sandbox; it reserves its size class's requests first (429 when over budget). */
  async resume(owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    const unlisten = this.progress.add(id, "resume", opts.onProgress);
    try {
      const r = await this.transitions.run(id, () => this.doResume(owner, id));
      this.audit("resume", owner, id);
      return r;
    } catch (err) {
      this.audit("resume", owner, id, err);
      throw err;
    } finally {
      unlisten();
    }
  }

  private async doResume(owner: string, id: string): Promise<Sandbox> {
    const { backend } = this.deps;
    const s = await this.owned(owner, id);
    if (!backend.resume) throw new ConflictError(`resume: the ${backend.name} backend does not support resume`);
    // a paused sandbox reports zero requests (it holds nothing); reserve what it will hold
    const sc = Object.hasOwn(this.deps.config.sizeClasses, s.size) ? this.deps.config.sizeClasses[s.size] : undefined;
    const reservedBefore = this.admission.has(id);
    this.admission.admit({ id, size: { name: s.size, cpuRequestMillis: sc?.cpuRequestMillis ?? s.cpuRequestMillis, memoryRequestBytes: sc?.memoryRequestBytes ?? s.memoryRequestBytes } });
    this.gone.delete(id);
    try {
      return await backend.resume(id, { onProgress: this.progress.sink(id) });
    } catch (err) {
      // give back only what this call reserved: a running sandbox's own reservation stays
      if (!reservedBefore) this.admission.release(id);
      throw err;
    }
  }

  /**
   * The backend's auto-resume (exec, files, logs, wait on a paused sandbox that allows it),
   * routed here so it reserves capacity like an explicit resume; over budget it is a 429 naming
   * the call that needed the sandbox, and the sandbox stays paused.
   */
  private async autoResume(id: string, op: string): Promise<void> {
    const s = await this.deps.backend.describe(id);
    if (!s) throw new NotFoundError("sandbox", id);
    try {
      await this.transitions.run(id, () => this.doResume(s.owner, id));
      this.audit("resume", s.owner, id, undefined, { auto: op });
    } catch (err) {
      this.audit("resume", s.owner, id, err, { auto: op });
      if (err instanceof CapacityError) {
        throw new CapacityError(`${op}: sandbox ${id} is paused and resuming it needs capacity: ${err.message}`, err.retryAfterSeconds, err.details);
      }
      throw err;
    }
  }

  async poolStatus(): Promise<PoolStatus[]> {
    const { backend } = this.deps;
    if (!backend.poolStatus) throw new ConflictError(`pool status: the ${backend.name} backend has no warm pool`);
    return backend.poolStatus();
  }

  /** Another owner's sandbox answers exactly like a missing one. Touches activity unless told not to. */
  private async owned(owner: string, id: string, opts: { touch?: boolean } = {}): Promise<Sandbox> {
    const s = typeof id === "string" && id.length > 0 && id.length <= 253 ? await this.deps.backend.describe(id) : undefined;
    if (!s || s.owner !== owner) throw new NotFoundError("sandbox", id);
    if (opts.touch ?? true) this.touch(s);
    return s;
  }

  /**
   * owned(), and a paused sandbox that allows auto-resume is resumed through resume() first, so
   * the wake passes admission. A backend that routes its auto-resume to us (routeAutoResume)
   * decides itself, at the moment it needs the sandbox (it knows the policy, and a pause that
   * starts after this check is covered too); this check is for backends that pause without it.
   */
  private async usable(owner: string, id: string): Promise<Sandbox> {
    const s = await this.owned(owner, id);
    const { backend } = this.deps;
    if (!backend.routeAutoResume && s.phase === "Paused" && backend.resume && s.metadata[AUTO_RESUME_KEY] !== "false") return this.resume(owner, id);
    return s;
  }

  private sameOwner(s: Sandbox, owner: string): Sandbox {
    if (s.owner !== owner) throw new NotFoundError("sandbox", s.id);
    return s;
  }

  /** Activity for the idle timeout; throttled, never on the request's critical path. */
  private touch(s: Sandbox): void {
    if (TERMINAL_PHASES.has(s.phase)) return;
    const now = this.deps.clock.now();
    const last = this.lastTouch.get(s.id);
    // at most every touchIntervalMs, and at least 4 times per idle timeout so throttling never reaps
    const idle = s.idleTimeoutSeconds ?? this.idleTimeouts.get(s.id);
    const every = Math.min(this.deps.touchIntervalMs ?? 2000, idle ? (idle * 1000) / 4 : Infinity);
    if (last !== undefined && now.getTime() - last < every) return;
    this.lastTouch.set(s.id, now.getTime());
    this.deps.backend.touch(s.id, now).catch((err) => {
      this.lastTouch.delete(s.id);
      this.log.warn({ sandbox: s.id, owner: s.owner, op: "touch", err }, "recording activity failed; the idle timeout may reap early");
    });
  }

  private onEvent(e: SandboxEvent): void {
    if (e.type === "delete") {
      if (this.admission.release(e.id)) this.log.info({ sandbox: e.id, owner: e.owner, op: "release" }, "sandbox gone; capacity released");
      this.forget(e.id);
      return;
    }
    const s = e.sandbox;
    if (!holdsCapacity(s.phase)) {
      if (this.admission.release(s.id)) this.log.info({ sandbox: s.id, owner: s.owner, op: "release", phase: s.phase, reason: s.reason }, "sandbox ended; capacity released");
      if (TERMINAL_PHASES.has(s.phase)) this.gone.set(s.id, Date.now());
      return;
    }
    // Live but unreserved (resumed elsewhere, created by another replica): count it, unless we
    // just saw it end (a late event must not resurrect a reservation).
    if (s.phase !== "Terminating" && !this.gone.has(s.id) && this.admission.adopt(s)) {
      this.log.info({ sandbox: s.id, owner: s.owner, op: "adopt" }, "live sandbox adopted into the admission budget");
    }
  }

  private forget(id: string): void {
    this.lastTouch.delete(id);
    this.idleTimeouts.delete(id);
    const now = Date.now();
    this.gone.set(id, now);
    for (const [k, t] of this.gone) if (now - t > GONE_MEMORY_MS) this.gone.delete(k);
  }

  private audit(op: AuditOp, owner: string, sandbox: string | undefined, err?: unknown, details?: Record<string, unknown>): void {
    const entry: AuditEntry = { time: this.deps.clock.now().toISOString(), op, owner, sandbox, outcome: err === undefined ? "ok" : "error", details };
    if (err !== undefined) {
      entry.error = errorCode(err);
      entry.message = (err as Error)?.message;
    }
    this.deps.audit.record(entry);
  }
}

