// The Manager: all sandbox policy on top of a Backend. It keeps no database: the substrate is
// the source of truth; the only in-process state is the admission budget (rebuilt from the
// substrate at start and reconciled by the reaper) and the creates in flight. Pause and resume
// are the pause/resume service's (PauseResumeService, runtime/snapshot/service.ts), which the Manager owns and calls
// directly; the Manager adds ownership, admission and audit, inside the service's queue turn.
// Over 400 lines on purpose: every public call is a short owner check + audit wrapper around one
// backend call; splitting them across files would scatter the one place those rules are applied.
// Over 400 lines for now: the Manager's verbs share its admission and pause/resume wiring; team
// quotas (admissionTeams.ts, pauseQuota.ts) live outside it, and exec/files are next to move.

import type { Duplex, Readable } from "node:stream";
import type { RuntimeConfig } from "../config/schema.ts";
import { ActivityTouches } from "./activity.ts";
import { Admission, admissionOptionsFor } from "./admission.ts";
import { AdmissionFollower } from "./admissionFollow.ts";
import type { AuditEntry, AuditOp, AuditStore } from "./audit.ts";
import type { ImageCatalog } from "./catalog.ts";
import type { Clock } from "./clock.ts";
import { CreatePath } from "./createPath.ts";
import { CapacityError, ConflictError, NotFoundError, SbxError } from "./errors.ts";
import { validateExecInput } from "./execInput.ts";
import type { Logger } from "./log.ts";
import { Maintenance, type MaintenanceTask } from "./maintenance.ts";
import { resolveMetadataUpdate } from "./metadataUpdate.ts";
import { errorCode, Metrics, observed, secondsSince } from "./metrics.ts";
import { pauseQuota } from "./pauseQuota.ts";
import { Reaper } from "./reaper.ts";
import { ResourceSampler } from "./resourceSampler.ts";
import { limitsOfSize } from "./resources.ts";
import { resumeAdmission } from "./resumeAdmission.ts";
import { validateOwner } from "./spec.ts";
import type {
  AttachedCommand,
  Backend,
  CommandAttachOptions,
  CreateRequest,
  ExecRequest,
  ExecSession,
  ListFilter,
  LogOptions,
  Manager,
  MetadataPatch,
  PauseResumeService,
  PoolStatus,
  RegisteredCommand,
  ResourceRange,
  Sandbox,
  SandboxResourceLine,
  SandboxResources,
  SandboxView,
  TransferOptions,
  WaitOptions,
} from "./types.ts";
import { reportUsage, type UsageReport } from "./usage.ts";

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
  /** pause/resume (config.snapshots); without it pause and resume are refused */
  pauseResume?: PauseResumeService;
  /** whether the reaper deletes now (see ReaperDeps.shouldReap); default always */
  shouldReap?: () => boolean;
}

/** what owned() looks up at all: anything else is a 404 without a read */
function isSandboxId(id: unknown): id is string {
  return typeof id === "string" && id.length > 0 && id.length <= 253;
}

export class SandboxManager implements Manager {
  readonly admission: Admission;
  readonly metrics: Metrics;
  readonly reaper: Reaper;
  /** per-sandbox resource figures; absent when the backend cannot read them or resources.sampleIntervalMs is 0 */
  readonly sampler?: ResourceSampler;
  private readonly samplerLoop?: Maintenance;
  /** the create path and the creates in flight (createPath.ts) */
  private readonly creates: CreatePath;
  private readonly activity: ActivityTouches;
  private readonly follower: AdmissionFollower;
  private lastList: readonly Sandbox[] = [];
  private unsubscribe?: () => void;
  private readonly log: Logger;
  private readonly maintenance: Maintenance;
  private readonly pr?: PauseResumeService;
  /** reads and deletes of sandboxes: through pause/resume when configured, so paused ones show */
  private readonly sandboxes: SandboxView;

  // Over 60 lines on purpose: one assignment per collaborator the Manager wires (admission,
  // teams, pause quotas, reaper, maintenance); splitting it would scatter the wiring.
  constructor(private readonly deps: ManagerDeps) {
    const { config } = deps;
    this.admission =
      deps.admission ??
      new Admission(config.budget, admissionOptionsFor(config, { nowMs: () => deps.clock.now().getTime() }));
    this.log = deps.logger;
    this.pr = deps.pauseResume;
    this.sandboxes = deps.pauseResume ?? deps.backend;
    this.activity = new ActivityTouches({
      backend: deps.backend,
      clock: deps.clock,
      logger: deps.logger,
      intervalMs: deps.touchIntervalMs,
    });
    this.follower = new AdmissionFollower({ admission: this.admission, logger: deps.logger });
    this.maintenance = new Maintenance({ tasks: deps.maintenance ?? [], clock: deps.clock, logger: deps.logger });
    [this.sampler, this.samplerLoop] = this.resourceSampler();
    this.metrics = new Metrics(
      {
        admission: () => this.admission.usage(),
        sandboxes: () => this.lastList,
        ...(deps.backend.claimStats ? { claims: () => deps.backend.claimStats?.() } : {}),
        ...(deps.backend.portStats ? { ports: () => deps.backend.portStats?.() } : {}),
        ...(deps.pauseResume?.layerStats ? { layers: () => deps.pauseResume?.layerStats?.() } : {}),
        ...(this.sampler ? { resources: () => this.sampler!.ownerTotals() } : {}),
      },
      { defaultMetrics: deps.processMetrics ?? false },
    );
    this.creates = new CreatePath({
      backend: deps.backend,
      config,
      catalog: deps.catalog,
      clock: deps.clock,
      logger: deps.logger,
      sandboxes: this.sandboxes,
      admission: this.admission,
      follower: this.follower,
      activity: this.activity,
      metrics: this.metrics,
      canPause: !!deps.pauseResume,
      audit: (...a) => this.audit(...a),
    });
    this.reaper = new Reaper({
      backend: this.sandboxes,
      admission: this.admission,
      audit: deps.audit,
      clock: deps.clock,
      logger: deps.logger,
      config: {
        idleTimeoutSeconds: config.defaults.idleTimeoutSeconds,
        finishedGraceSeconds: config.defaults.finishedGraceSeconds,
      },
      inFlight: () => this.creates.inFlight(),
      onList: (all) => (this.lastList = all),
      onReap: (a) => {
        this.metrics.reaped.inc({ reason: a.reason });
        this.forget(a.id);
      },
      idleTimeoutFor: (id) => this.activity.idleTimeoutOf(id),
      intervalMs: deps.reaperIntervalMs,
      shouldReap: deps.shouldReap,
    });
  }

  /** The sampler and its loop, when the backend reads resources and config.resources leaves it on. */
  private resourceSampler(): [ResourceSampler?, Maintenance?] {
    const { backend, config, clock, logger } = this.deps;
    const rc = config.resources;
    if (!backend.readResources || !rc || rc.sampleIntervalMs <= 0) return [];
    const sampler = new ResourceSampler({
      read: () => backend.readResources!(),
      clock,
      logger,
      intervalMs: rc.sampleIntervalMs,
      historySeconds: rc.historySeconds,
      memoryWarnFraction: rc.memoryWarnFraction,
      onWarning: () => this.metrics.memoryWarnings?.inc(),
    });
    const loop = new Maintenance({
      tasks: [{ name: "resources.sample", everyMs: rc.sampleIntervalMs, run: () => sampler.tick() }],
      clock,
      logger,
    });
    return [sampler, loop];
  }

  get backendName(): string {
    return this.deps.backend.name;
  }

  /** Start the backend, rebuild the budget from what is live, follow events, start the reaper. */
  async start(
    opts: { reaper?: boolean; maintenance?: boolean; recover?: boolean; resources?: boolean } = {},
  ): Promise<void> {
    const { backend } = this.deps;
    this.deps.catalog.start();
    await backend.start();
    // recover: false leaves interrupted pauses and resumes to another process (the manager role: the controller's)
    if (opts.recover ?? true) await this.pr?.recover();
    this.unsubscribe = this.sandboxes.subscribe((e) => {
      this.follower.onEvent(e);
      if (e.type === "delete") this.sampler?.forget(e.id);
    });
    const live = await this.sandboxes.list();
    this.lastList = live;
    const { adopted } = this.admission.rebuild(live, this.creates.inFlight());
    this.log.info(
      {
        op: "start",
        backend: backend.name,
        live: live.length,
        adopted: adopted.length,
        budget: this.admission.usage(),
      },
      "manager started; admission budget rebuilt from live sandboxes",
    );
    if (opts.reaper ?? true) this.reaper.start();
    if (opts.maintenance ?? opts.reaper ?? true) this.maintenance.start();
    if (opts.resources ?? true) this.samplerLoop?.start();
  }

  async close(): Promise<void> {
    await this.maintenance.stop();
    await this.samplerLoop?.stop();
    await this.reaper.stop();
    this.unsubscribe?.();
    this.deps.catalog.close();
    await this.deps.backend.close();
    await this.deps.audit.close();
  }

  create(req: CreateRequest): Promise<Sandbox> {
    return this.creates.create(req);
  }

  async wait(owner: string, id: string, opts: WaitOptions): Promise<Sandbox> {
    await this.usable(owner, id, "wait");
    return observed(this.metrics.wait, () => this.deps.backend.awaitReady(id, opts));
  }

  async exec(owner: string, id: string, req: ExecRequest): Promise<ExecSession> {
    const details = { command: req.command };
    try {
      // here, not only in the HTTP route: the CLI's direct Kubernetes mode calls the Manager itself
      validateExecInput(req);
      await this.usable(owner, id, "exec");
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

  // without a registry in the backend there is nothing to look up: no reason to wake a paused sandbox
  async listCommands(owner: string, id: string): Promise<RegisteredCommand[] | undefined> {
    const { commands } = this.deps.backend;
    if (!commands) return undefined;
    await this.usable(owner, id, "list commands");
    return commands.list(id);
  }

  async attachCommand(
    owner: string,
    id: string,
    commandId: string,
    stdin?: Readable,
    o?: CommandAttachOptions,
  ): Promise<AttachedCommand | undefined> {
    const { commands } = this.deps.backend;
    if (!commands) return undefined;
    await this.usable(owner, id, "attach to a command");
    return commands.attach(id, commandId, stdin, o);
  }

  async putArchive(owner: string, id: string, dir: string, tar: Readable): Promise<void> {
    try {
      await this.usable(owner, id, "upload files");
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
    await this.usable(owner, id, "download files");
    return this.deps.backend.getArchive(id, path);
  }

  async logs(owner: string, id: string, opts: LogOptions): Promise<Readable> {
    await this.usable(owner, id, "logs");
    return this.deps.backend.logs(id, opts);
  }

  /**
   * A connection to `port` inside the sandbox: owner-checked (another owner's sandbox is a 404),
   * counted as activity, and a paused sandbox is woken first when it allows auto-resume.
   */
  async openPort(owner: string, id: string, port: number): Promise<Duplex> {
    await this.usable(owner, id, `port ${port}`);
    const { backend } = this.deps;
    if (!backend.openPort)
      throw new ConflictError(`port ${port}: the ${backend.name} backend cannot relay traffic to sandbox ports yet`);
    return backend.openPort(id, port);
  }

  /** GET /v1/usage: the caller's team's use against its limits (every team for tenancy.admins). */
  usage(owner: string, team?: string): UsageReport {
    return reportUsage(owner, this.deps.config.tenancy, this.admission.usage(), this.lastList, team);
  }

  /**
   * A sandbox's resource history in `range`: owner-checked like every call (another owner's is a
   * 404), but not activity and never a wake (looking at a sandbox does not keep it alive).
   */
  async resources(owner: string, id: string, range: ResourceRange = {}): Promise<SandboxResources> {
    const s = await this.owned(owner, id, { touch: false });
    const sampler = this.requireSampler();
    return (
      sampler.of(id, range.startMs, range.endMs) ?? {
        id,
        intervalMs: sampler.intervalMs,
        limits: limitsOfSize(this.deps.config.sizeClasses[s.size]),
        samples: [],
        events: [],
      }
    );
  }

  /** Every sandbox of the owner with its newest sample (paused and starting ones have none). */
  async resourceLines(owner: string): Promise<SandboxResourceLine[]> {
    const sampler = this.requireSampler();
    const mine = await this.list({ owner });
    const latest = new Map(sampler.latestOf(mine.map((s) => s.id)).map((l) => [l.id, l]));
    return mine.map((s) => {
      const l = latest.get(s.id);
      return {
        id: s.id,
        phase: s.phase,
        limits: l?.limits ?? limitsOfSize(this.deps.config.sizeClasses[s.size]),
        ...(l ? { latest: l.sample } : {}),
      };
    });
  }

  private requireSampler(): ResourceSampler {
    if (this.sampler) return this.sampler;
    const { backend } = this.deps;
    throw new ConflictError(
      backend.readResources
        ? "metrics: resource sampling is off (config resources.sampleIntervalMs is 0); set it to e.g. 5000"
        : `metrics: the ${backend.name} backend cannot read sandbox resources yet`,
    );
  }

  async get(owner: string, id: string): Promise<Sandbox> {
    return this.owned(owner, id);
  }

  async list(filter: ListFilter): Promise<Sandbox[]> {
    const owner = validateOwner(filter.owner);
    const all = await this.sandboxes.list();
    return all.filter((s) => s.owner === owner).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /**
   * Metadata changes after create, in the sandbox's durable record (every replica sees them). Only
   * while it runs: a paused sandbox's record is the pause/resume service's, and a resume starts
   * from the spec it took at pause time. Except `whilePaused` on a backend whose sandbox object
   * keeps its metadata across a pause (ComputeRelease.keepsMetadata: Kubernetes): there the write
   * is one patch of that object, which no pause or resume step rewrites, so it cannot be lost to
   * a racing resume and is what the woken sandbox has.
   */
  updateMetadata(
    owner: string,
    id: string,
    patch: MetadataPatch,
    opts: { whilePaused?: boolean } = {},
  ): Promise<Sandbox> {
    return this.audited("update", owner, id, async () => {
      const s = await this.owned(owner, id, { touch: false });
      resolveMetadataUpdate(s.metadata, patch);
      const { backend } = this.deps;
      const asleep = s.phase === "Paused" || s.phase === "Pausing" || s.phase === "Resuming";
      if (asleep && !(opts.whilePaused && this.pr?.keepsMetadata))
        throw new ConflictError(`update metadata: sandbox ${id} is ${s.phase.toLowerCase()}; resume it first`);
      if (!backend.updateMetadata)
        throw new ConflictError(`update metadata: the ${backend.name} backend cannot change metadata after create`);
      return backend.updateMetadata(id, patch);
    });
  }

  async listMarked(key: string): Promise<Sandbox[]> {
    return (await this.sandboxes.list()).filter((s) => Object.hasOwn(s.metadata, key));
  }

  kill(owner: string, id: string): Promise<void> {
    return this.audited("kill", owner, id, async () => {
      await this.owned(owner, id, { touch: false });
      await this.sandboxes.delete(id);
      this.admission.release(id);
      this.forget(id);
    });
  }

  /**
   * Snapshot and release the compute; the sandbox's reservation returns to admission. The
   * ownership check and the release run in the service's queue turn for the sandbox, so they
   * never interleave with another pause or resume of it.
   */
  pause(owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    return this.audited("pause", owner, id, async () => {
      const pr = await this.pauseResume(owner, id, "pause");
      let s: Sandbox | undefined;
      // its team (stamped at create, else its owner's); before() below still answers a missing one
      const known = await this.owned(owner, id, { touch: false }).catch(() => undefined);
      const quota = pauseQuota(known ?? { id, owner }, {
        tenancy: this.deps.config.tenancy,
        pausedSnapshots: async () => (await pr.pausedSnapshots?.()) ?? [],
        retryAfterSeconds: this.admission.retryAfterSeconds,
      });
      await pr.pause(id, {
        onProgress: opts.onProgress,
        before: async () => {
          await this.owned(owner, id);
          await quota.before?.();
        },
        ...(quota.snapshotWritten ? { snapshotWritten: quota.snapshotWritten } : {}),
        done: async () => {
          this.admission.release(id); // a paused sandbox holds no compute
          s = await pr.describe(id); // before another operation of the sandbox can start
        },
      });
      if (!s) throw new NotFoundError("sandbox", id);
      return s;
    });
  }

  /** Restore a paused sandbox; it reserves its size class's requests first (429 when over budget). */
  resume(owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    return this.audited("resume", owner, id, () => this.resumeAdmitted(owner, id, opts));
  }

  /** The resume, with its reservation taken in its queue turn and given back if it fails. */
  private async resumeAdmitted(owner: string, id: string, opts: TransferOptions): Promise<Sandbox> {
    const hooks = resumeAdmission(id, {
      admission: this.admission,
      sizeClasses: this.deps.config.sizeClasses,
      owned: () => this.owned(owner, id),
      reserved: (x) => this.follower.revived(x),
    });
    return (await this.pauseResume(owner, id, "resume")).resume(id, { onProgress: opts.onProgress, ...hooks });
  }

  /**
   * The wake of a paused sandbox that a call needs running (exec, files, logs, wait; the
   * service decides whether it may): an admission-checked resume like an explicit one. Over
   * budget it is a 429 naming the call that needed the sandbox, and the sandbox stays paused.
   */
  private async autoResume(id: string, op: string): Promise<void> {
    const s = await this.sandboxes.describe(id);
    if (!s) throw new NotFoundError("sandbox", id);
    try {
      await this.audited("resume", s.owner, id, () => this.resumeAdmitted(s.owner, id, {}), { auto: op });
    } catch (err) {
      if (err instanceof CapacityError) {
        throw new CapacityError(
          `${op}: sandbox ${id} is paused and resuming it needs capacity: ${err.message}`,
          err.retryAfterSeconds,
          err.details,
        );
      }
      throw err;
    }
  }

  /** The service; without one, a 404 for a sandbox that is not the caller's comes before the 409. */
  private async pauseResume(owner: string, id: string, op: "pause" | "resume"): Promise<PauseResumeService> {
    if (this.pr) return this.pr;
    await this.owned(owner, id);
    const { name } = this.deps.backend;
    throw new ConflictError(
      op === "pause"
        ? `pause: the ${name} backend does not support pause; kill the sandbox instead`
        : `resume: the ${name} backend does not support resume`,
    );
  }

  async poolStatus(): Promise<PoolStatus[]> {
    const { backend } = this.deps;
    if (!backend.poolStatus) throw new ConflictError(`pool status: the ${backend.name} backend has no warm pool`);
    return backend.poolStatus();
  }

  /** Another owner's sandbox answers exactly like a missing one. Touches activity unless told not to. */
  private async owned(owner: string, id: string, opts: { touch?: boolean } = {}): Promise<Sandbox> {
    return this.ownedOf(owner, id, isSandboxId(id) ? await this.sandboxes.describe(id) : undefined, opts);
  }

  private ownedOf(owner: string, id: string, s: Sandbox | undefined, opts: { touch?: boolean } = {}): Sandbox {
    if (!s || s.owner !== owner) throw new NotFoundError("sandbox", id);
    if (opts.touch ?? true) this.activity.touch(s);
    return s;
  }

  /**
   * owned(), and a paused sandbox is woken first when the pause/resume service says the call
   * (`what`) may wake it: through resume(), so the wake passes admission. One read of the pause
   * record answers both (describeForCall), so an exec reads it once.
   */
  private async usable(owner: string, id: string, what: string): Promise<void> {
    if (!this.pr) {
      await this.owned(owner, id);
      return;
    }
    const seen = isSandboxId(id) ? await this.pr.describeForCall(id) : undefined;
    this.ownedOf(owner, id, seen?.sandbox);
    if (seen?.wake(what)) await this.autoResume(id, what);
  }

  private forget(id: string): void {
    this.activity.forget(id);
    this.sampler?.forget(id);
    this.follower.ended(id);
  }

  /** Runs fn and records its outcome in the audit log. */
  private async audited<T>(
    op: AuditOp,
    owner: string,
    id: string,
    fn: () => Promise<T>,
    details?: Record<string, unknown>,
  ): Promise<T> {
    try {
      const r = await fn();
      this.audit(op, owner, id, undefined, details);
      return r;
    } catch (err) {
      this.audit(op, owner, id, err, details);
      throw err;
    }
  }

  private audit(
    op: AuditOp,
    owner: string,
    sandbox: string | undefined,
    err?: unknown,
    details?: Record<string, unknown>,
  ): void {
    const entry: AuditEntry = {
      time: this.deps.clock.now().toISOString(),
      op,
      owner,
      sandbox,
      outcome: err === undefined ? "ok" : "error",
      details,
    };
    if (err !== undefined) {
      entry.error = errorCode(err);
      entry.message = (err as Error)?.message;
    }
    this.deps.audit.record(entry);
  }
}
