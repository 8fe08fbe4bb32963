// The Manager's create path: resolve the spec, share one create among concurrent retries with the
// same (owner, clientKey), admit it, claim a warm slot else provision, and record the outcome
// (audit, metrics, log). Its own file because it is the one verb with a life of its own: the
// creates in flight are state the reaper and the admission rebuild must see (inFlight()).
import type { RuntimeConfig } from "../config/schema.ts";
import { TEAM_METADATA_KEY, type TenancyConfig } from "../config/tenancy.ts";
import type { ActivityTouches } from "./activity.ts";
import type { Admission } from "./admission.ts";
import type { AdmissionFollower } from "./admissionFollow.ts";
import type { AuditOp } from "./audit.ts";
import type { ImageCatalog } from "./catalog.ts";
import type { Clock } from "./clock.ts";
import { CapacityError, ConflictError, NotFoundError, SbxError, ValidationError } from "./errors.ts";
import type { Logger } from "./log.ts";
import { errorCode, type Metrics, observed, secondsSince } from "./metrics.ts";
import { resolveSpec } from "./spec.ts";
import type { Backend, CreateRequest, Sandbox, SandboxSpec, SandboxView } from "./types.ts";

export interface CreatePathDeps {
  /** claims and provisions */
  backend: Backend;
  /** looks up keyed sandboxes that exist already: through pause/resume when configured, so paused ones show */
  sandboxes: SandboxView;
  config: RuntimeConfig;
  catalog: ImageCatalog;
  clock: Clock;
  logger: Logger;
  admission: Admission;
  follower: AdmissionFollower;
  activity: ActivityTouches;
  metrics: Metrics;
  /** whether this service can pause (a create with autoPause is refused otherwise) */
  canPause: boolean;
  /** the Manager's audit record of one call */
  audit(
    op: AuditOp,
    owner: string,
    sandbox: string | undefined,
    err?: unknown,
    details?: Record<string, unknown>,
  ): void;
}

export class CreatePath {
  private readonly creating = new Map<string, Promise<Sandbox>>();

  constructor(private readonly d: CreatePathDeps) {}

  /** ids of the creates running now: not yet on the substrate, but holding a reservation */
  inFlight(): Set<string> {
    return new Set(this.creating.keys());
  }

  async create(req: CreateRequest): Promise<Sandbox> {
    const t0 = process.hrtime.bigint();
    let spec: SandboxSpec;
    try {
      spec = resolveSpec(req, this.d.config, (p) => this.d.catalog.resolve(p), this.d.clock.now());
      stampTeam(spec, req.team, this.d.config.tenancy);
    } catch (err) {
      this.d.audit("create", String(req.owner), undefined, err);
      throw err;
    }
    if (spec.autoPause && !this.d.canPause) {
      const err = new ValidationError(
        "autoPause",
        "(policy)",
        "this service cannot pause sandboxes: configure snapshots.registry, or create without autoPause",
      );
      this.d.audit("create", spec.owner, undefined, err);
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
    const { sandboxes: backend, admission, metrics } = this.d;
    const log = this.d.logger.child({ sandbox: spec.id, owner: spec.owner, op: "create" });
    let path = "cold";
    try {
      if (spec.clientKey !== undefined) {
        const existing = await backend.describe(spec.id);
        if (existing) {
          path = "existing";
          metrics.createAccept.observe({ outcome: "ok", path }, secondsSince(t0));
          return sameOwner(existing, spec.owner);
        }
      }
      await this.awaitShareRenewal();
      try {
        admission.admit(spec);
      } catch (err) {
        if (err instanceof CapacityError) metrics.admissionRejects.inc();
        throw err;
      }
      this.d.follower.revived(spec.id);
      let sandbox: Sandbox;
      try {
        sandbox = (await this.claim(spec)) ?? (await this.provision(spec));
        if (sandbox.warm) path = "warm";
      } catch (err) {
        admission.release(spec.id);
        // Another replica (or a restarted us) created this keyed sandbox first: that is the answer.
        if (err instanceof ConflictError && spec.clientKey !== undefined) {
          const existing = await backend.describe(spec.id);
          if (existing) {
            path = "existing";
            return sameOwner(existing, spec.owner);
          }
        }
        throw err;
      }
      this.d.activity.created(sandbox.id, spec.idleTimeoutSeconds);
      if (sandbox.id !== spec.id) {
        // A backend that hands out its own ids: move the reservation to the id callers will use.
        admission.release(spec.id);
        admission.adopt(sandbox);
      }
      this.d.audit("create", spec.owner, sandbox.id, undefined, {
        profile: spec.image.profile,
        size: spec.size.name,
        path,
      });
      log.info({ path, phase: sandbox.phase }, "sandbox accepted");
      metrics.createAccept.observe({ outcome: "ok", path }, secondsSince(t0));
      return sandbox;
    } catch (err) {
      this.d.audit("create", spec.owner, spec.id, err, { profile: spec.image.profile, size: spec.size.name });
      metrics.createAccept.observe({ outcome: errorCode(err), path }, secondsSince(t0));
      if (!(err instanceof SbxError) || err.code === "upstream") log.error({ err }, "create failed");
      throw err;
    }
  }

  /**
   * A replica fenced only because its budget-share renewal is late answers 429 replica_fenced
   * although its share may be free: wait (bounded by the scope) for the renewal first. Counted
   * by outcome, since each wait is create latency spent on the API server.
   */
  private async awaitShareRenewal(): Promise<void> {
    const waiting = this.d.admission.renewal();
    if (!waiting) return;
    const t0 = process.hrtime.bigint();
    const outcome = await waiting;
    this.d.metrics.renewalWaits.observe({ outcome }, secondsSince(t0));
  }

  private async claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    const s = await observed(
      this.d.metrics.claim,
      () => this.d.backend.claim(spec),
      (r) => (r ? "hit" : "miss"),
      () => "error",
    );
    return s ? { ...s, warm: true } : undefined;
  }

  private provision(spec: SandboxSpec): Promise<Sandbox> {
    return observed(this.d.metrics.provision, () => this.d.backend.provision(spec));
  }
}

/** Another owner's keyed sandbox answers exactly like a missing one. */
function sameOwner(s: Sandbox, owner: string): Sandbox {
  if (s.owner !== owner) throw new NotFoundError("sandbox", s.id);
  return s;
}

/**
 * A create whose token named a configured team counts against that team wherever the sandbox is
 * counted (docs/tenancy.md): the team goes on the sandbox, under a key no caller may set.
 */
function stampTeam(spec: SandboxSpec, team: string | undefined, tenancy: TenancyConfig | undefined): void {
  if (team === undefined || !tenancy?.enabled || !Object.hasOwn(tenancy.teams, team)) return;
  spec.metadata = { ...spec.metadata, [TEAM_METADATA_KEY]: team };
}
