// Admission: the in-memory gate in front of the substrate. Every create reserves its CPU and
// memory requests here before anything exists; over-budget creates get a CapacityError (429)
// naming what is short. The namespace ResourceQuota stays the hard ceiling behind it.
//
// All methods are synchronous on purpose: JavaScript runs them to completion, so two
// concurrent creates can never both see the same free room. That is what makes "never over
// budget" hold without locks.
import type { TenancyConfig } from "../config/tenancy.ts";
import { TeamAdmission, type TeamScope, type TeamUsage, useDims } from "./admissionTeams.ts";
import type { TeamAdmitDecision, Vec } from "./decideTeamAdmission.ts";
import { CapacityError } from "./errors.ts";
import { formatCpu, formatMemory } from "./quantity.ts";
import { type Sandbox, TERMINAL_PHASES } from "./types.ts";

export interface Budget {
  cpuMillis: number;
  memoryBytes: number;
  /** with teams and a shared budget: the team limits' dimensions (runtime/k8s/budget/sharePlan.ts) */
  dims?: Record<string, number>;
}

export interface Reservation {
  id: string;
  cpuMillis: number;
  memoryBytes: number;
  /** order of reservation; a reconcile only drops reservations older than its listing */
  seq: number;
  /** the owner's team, when tenancy is configured */
  team?: string;
}

export interface AdmissionUsage {
  /** what this replica admits against: the whole budget, or its share when the budget is shared */
  budget: Budget;
  /** the whole budget, shared or not (the configured one) */
  total: Budget;
  used: Budget;
  free: Budget;
  reservations: number;
  /** present when the budget is shared between replicas */
  shared?: SharedBudgetStats;
  /** per team, when tenancy is configured (config.tenancy) */
  teams?: TeamUsage[];
}

export interface SharedBudgetStats {
  /** share changes this replica wrote */
  moves: { grow: number; shrink: number };
  /** live replicas holding a share, this one included */
  replicas: number;
  /** true while this replica may admit nothing: it has not renewed its share for most of a lease */
  fenced: boolean;
  /** compare-and-swaps of the shared document lost to another replica's write */
  conflicts?: number;
  /** rounds that lost every compare-and-swap they tried and wrote nothing */
  abandoned?: number;
  /** since this replica's last share write that landed was sent; undefined before the first */
  renewedAgoMs?: number;
}

export interface AdmissionOptions {
  /** the Retry-After a rejected caller is told; capacity frees as sandboxes end */
  retryAfterSeconds?: number;
  /** this replica's part of a budget shared by several replicas; absent: the whole budget is ours */
  scope?: AdmissionScope;
  /** teams and their quotas (config.tenancy); absent or without teams: one budget for everyone */
  tenancy?: TenancyConfig;
  /** for the teams' rate buckets: monotonic-enough milliseconds; default Date.now */
  nowMs?: () => number;
  /** the smallest requests a create can make (the smallest size class): the guarantee reserve's grain */
  granule?: Budget;
}

/**
 * A budget shared by several replicas (runtime/k8s/budget): each admits only within its own
 * share and counts only the sandboxes it admitted; the others' count against their shares.
 */
export interface AdmissionScope {
  /** what this replica may hold now; read on every admit, so it must be synchronous and cheap */
  limit(): Budget;
  /** whether a live sandbox found on the substrate was admitted by this replica */
  counts(id: string): boolean;
  /**
   * called once by the Admission it scopes: the scope sizes its share by what is used, and never
   * below that plus `kept`, the room a share holds for other teams' unused guarantees
   */
  attach?(used: () => Budget, kept?: (share: Budget) => Vec): void;
  stats?(): SharedBudgetStats;
  /** true while the share cannot be trusted (not renewed): rejects say so instead of naming the share */
  fenced?(): boolean;
  /**
   * Called only while fenced: resolves once a late renewal landed (true) or could not in time
   * (false), bounded by the scope. Creates wait here before admit(), which stays synchronous.
   */
  awaitRenewal?(): Promise<boolean>;
  /** the teams' side of the shared budget (their limits' parts, the others' use) */
  teams?: TeamScope;
}

/** What admission needs from a spec: its id, its size class's requests, and whose it is (for its team). */
export interface AdmissionRequest {
  id: string;
  size: { name?: string; cpuRequestMillis: number; memoryRequestBytes: number };
  owner?: string;
  /** its metadata: the team stamped at create (TEAM_METADATA_KEY) wins over the owner's */
  metadata?: Record<string, string>;
}

export class Admission {
  private readonly reservations = new Map<string, Reservation>();
  private usedCpu = 0;
  private usedMemory = 0;
  private nextSeq = 1;
  readonly retryAfterSeconds: number;
  private readonly scope?: AdmissionScope;
  /** the team half (admissionTeams.ts); absent without configured teams */
  readonly teams?: TeamAdmission;

  constructor(
    readonly budget: Budget,
    opts: AdmissionOptions = {},
  ) {
    this.retryAfterSeconds = opts.retryAfterSeconds ?? 5;
    this.scope = opts.scope;
    if (opts.tenancy?.enabled) {
      this.teams = new TeamAdmission(opts.tenancy, {
        nowMs: opts.nowMs ?? Date.now,
        granule: opts.granule ?? { cpuMillis: 1, memoryBytes: 1 },
      });
      if (opts.scope?.teams) this.teams.scope = opts.scope.teams;
    }
    const teams = this.teams;
    this.scope?.attach?.(
      () => ({
        cpuMillis: this.usedCpu,
        memoryBytes: this.usedMemory,
        ...(teams ? { dims: useDims(teams.usedHere()) } : {}),
      }),
      teams ? (share) => teams.kept({ limit: share, total: this.budget }) : undefined,
    );
  }

  /**
   * For a create about to admit: while this replica's share is fenced (its renewal is late), a
   * promise of the scope's wait for that renewal, "renewed" or "fenced"; otherwise undefined, at
   * no cost, so the common path never awaits. admit() decides afterwards as always.
   */
  renewal(): Promise<"renewed" | "fenced"> | undefined {
    const s = this.scope;
    if (!s?.awaitRenewal || !s.fenced?.()) return undefined;
    return s.awaitRenewal().then((ok) => (ok ? "renewed" : "fenced"));
  }

  /** What admits are checked against: this replica's share when the budget is shared. */
  limit(): Budget {
    return this.scope?.limit() ?? this.budget;
  }

  /**
   * Reserve the spec's requests or throw CapacityError. Admitting an id that already holds a
   * reservation returns that reservation (a retried create is not counted twice).
   */
  admit(req: AdmissionRequest): Reservation {
    const existing = this.reservations.get(req.id);
    if (existing) return existing;
    const cpu = req.size.cpuRequestMillis;
    const mem = req.size.memoryRequestBytes;
    const lim = this.limit();
    if (this.teams) return this.admitForTeam(req, lim);
    const short: string[] = [];
    if (this.usedCpu + cpu > lim.cpuMillis) {
      short.push(
        `cpu (requested ${formatCpu(cpu)}, free ${formatCpu(Math.max(0, lim.cpuMillis - this.usedCpu))} of ${formatCpu(lim.cpuMillis)})`,
      );
    }
    if (this.usedMemory + mem > lim.memoryBytes) {
      short.push(
        `memory (requested ${formatMemory(mem)}, free ${formatMemory(Math.max(0, lim.memoryBytes - this.usedMemory))} of ${formatMemory(lim.memoryBytes)})`,
      );
    }
    if (short.length > 0) {
      // shared: the 429 says it is this replica's share, which moves to demand within a second or two
      const fenced = this.scope?.fenced?.() ?? false;
      const whose = !this.scope
        ? ""
        : fenced
          ? " (this replica could not renew its share of the budget for half a lease: the API server is unreachable or slow from here; another replica may admit)"
          : ` (this replica's share of the budget of cpu ${formatCpu(this.budget.cpuMillis)}, memory ${formatMemory(this.budget.memoryBytes)}; shares move to where demand is)`;
      throw new CapacityError(
        `admission: not enough capacity for size ${req.size.name ?? "?"}: short on ${short.join(" and ")}${whose}; retry later, kill idle sandboxes, or use a smaller size`,
        this.retryAfterSeconds,
        {
          short: short.map((s) => s.split(" ")[0]),
          ...(this.scope ? { reason: fenced ? "replica_fenced" : "replica_share" } : {}),
        },
      );
    }
    return this.add(req.id, cpu, mem);
  }

  /** The team path: one decision (decideTeamAdmission.ts), then the reservation as usual. */
  private admitForTeam(req: AdmissionRequest, lim: Budget): Reservation {
    const teams = this.teams!;
    const team = teams.teamOf(req);
    const request = { cpuMillis: req.size.cpuRequestMillis, memoryBytes: req.size.memoryRequestBytes };
    const used = { cpuMillis: this.usedCpu, memoryBytes: this.usedMemory };
    const d = teams.decide(team, request, { limit: lim, used, total: this.budget });
    if (!d.admit) throw this.teamRefusal(team, req, d, lim);
    return this.add(req.id, request.cpuMillis, request.memoryBytes, team);
  }

  private teamRefusal(
    team: string,
    req: AdmissionRequest,
    d: Exclude<TeamAdmitDecision, { admit: true }>,
    lim: Budget,
  ): CapacityError {
    const fenced = this.scope?.fenced?.() ?? false;
    const size = req.size.name ?? "?";
    const details = { reason: d.reason, team, short: d.short, ...(this.scope ? { replicaFenced: fenced } : {}) };
    if (d.reason === "team_rate") {
      const secs = Math.max(1, Math.ceil((d.retryAfterMs ?? 1000) / 1000));
      const rate = this.teams!.tenancy.teams[team]?.limits.createsPerMinute;
      return new CapacityError(
        `admission: team ${team} is over its rate of ${rate} creates per minute (creates, warm claims and resumes count); retry after ${secs} s`,
        secs,
        details,
      );
    }
    if (d.reason === "team_quota") {
      const l = this.teams!.tenancy.teams[team]?.limits ?? {};
      const what = d.short.map((x) =>
        x === "sandboxes"
          ? `live sandboxes (${l.sandboxes})`
          : x === "cpu"
            ? `cpu (${formatCpu(l.cpuMillis ?? 0)})`
            : `memory (${formatMemory(l.memoryBytes ?? 0)})`,
      );
      const shared = this.scope
        ? "; with several replicas each holds a part of it, which moves to where the demand is"
        : "";
      return new CapacityError(
        `admission: team ${team} is at its limit on ${what.join(" and ")} for size ${size}${shared}; kill or pause some of the team's sandboxes, or raise tenancy.teams[${team}].limits`,
        this.retryAfterSeconds,
        details,
      );
    }
    const whose = !this.scope
      ? "the budget"
      : fenced
        ? "this replica's share of the budget (fenced: it could not renew its share; another replica may admit)"
        : "this replica's share of the budget (shares move to where demand is)";
    return new CapacityError(
      `admission: not enough capacity for size ${size} in ${whose}: short on ${d.short.join(" and ")} (cpu ${formatCpu(this.usedCpu)} of ${formatCpu(lim.cpuMillis)}, memory ${formatMemory(this.usedMemory)} of ${formatMemory(lim.memoryBytes)} used; room the other teams' unused guarantees need is kept for them); retry later or use a smaller size`,
      this.retryAfterSeconds,
      details,
    );
  }

  /** Give a reservation back. Idempotent: releasing an unknown id is a no-op returning false. */
  release(id: string): boolean {
    const r = this.reservations.get(id);
    if (!r) return false;
    this.reservations.delete(id);
    this.usedCpu -= r.cpuMillis;
    this.usedMemory -= r.memoryBytes;
    if (r.team !== undefined) this.teams?.remove(r.team, r.cpuMillis, r.memoryBytes);
    return true;
  }

  has(id: string): boolean {
    return this.reservations.has(id);
  }

  ids(): string[] {
    return [...this.reservations.keys()];
  }

  /**
   * Account for a sandbox that exists but holds no reservation (found after a restart, or
   * created by another replica). Never rejects: it already runs, so the budget must show it
   * even when that puts usage over the budget (new creates are then rejected until it drops).
   */
  adopt(
    s: Pick<Sandbox, "id" | "phase" | "cpuRequestMillis" | "memoryRequestBytes"> & {
      owner?: string;
      metadata?: Record<string, string>;
    },
  ): boolean {
    if (this.reservations.has(s.id) || !holdsCapacity(s.phase)) return false;
    // another replica's sandbox counts against that replica's share, not ours
    if (this.scope && !this.scope.counts(s.id)) return false;
    this.add(s.id, s.cpuRequestMillis, s.memoryRequestBytes, this.teams?.teamOf(s));
    return true;
  }

  /** A marker to take before listing the substrate; pass it to rebuild as `listedAfter`. */
  mark(): number {
    return this.nextSeq;
  }

  /**
   * Make the budget equal what is live: adopt every live sandbox that holds capacity, drop
   * reservations whose sandbox is gone or terminal. `keep` lists ids that must survive even
   * when not (yet) listed: creates still in flight. Reservations made at or after `listedAfter`
   * (a mark() taken before the listing) are newer than the listing and always survive.
   */
  rebuild(
    live: readonly Sandbox[],
    keep: ReadonlySet<string> = new Set(),
    listedAfter: number = Number.POSITIVE_INFINITY,
  ): { adopted: string[]; released: string[] } {
    const liveHolding = new Map(live.filter((s) => holdsCapacity(s.phase)).map((s) => [s.id, s]));
    const released: string[] = [];
    for (const [id, r] of this.reservations) {
      if (!liveHolding.has(id) && !keep.has(id) && r.seq < listedAfter) {
        this.release(id);
        released.push(id);
      }
    }
    const adopted: string[] = [];
    for (const s of liveHolding.values()) if (this.adopt(s)) adopted.push(s.id);
    return { adopted, released };
  }

  /** budget is what this replica admits against: its share when the budget is shared */
  usage(): AdmissionUsage {
    const used = { cpuMillis: this.usedCpu, memoryBytes: this.usedMemory };
    const lim = this.limit();
    return {
      budget: { ...lim },
      total: { ...this.budget },
      used,
      free: {
        cpuMillis: lim.cpuMillis - used.cpuMillis,
        memoryBytes: lim.memoryBytes - used.memoryBytes,
      },
      reservations: this.reservations.size,
      ...(this.scope?.stats ? { shared: this.scope.stats() } : {}),
      ...(this.teams ? { teams: this.teams.usage() } : {}),
    };
  }

  private add(id: string, cpuMillis: number, memoryBytes: number, team?: string): Reservation {
    const r: Reservation = { id, cpuMillis, memoryBytes, seq: this.nextSeq++, ...(team !== undefined ? { team } : {}) };
    this.reservations.set(r.id, r);
    this.usedCpu += r.cpuMillis;
    this.usedMemory += r.memoryBytes;
    if (team !== undefined) this.teams?.add(team, cpuMillis, memoryBytes);
    return r;
  }
}

/** Admission as config asks for it: the budget, and the teams when tenancy is configured. */
export function admissionOptionsFor(
  config: {
    tenancy?: TenancyConfig;
    sizeClasses?: Record<string, { cpuRequestMillis: number; memoryRequestBytes: number }>;
  },
  extra: AdmissionOptions = {},
): AdmissionOptions {
  const sizes = Object.values(config.sizeClasses ?? {});
  const granule = {
    cpuMillis: sizes.length ? Math.min(...sizes.map((s) => s.cpuRequestMillis)) : 1,
    memoryBytes: sizes.length ? Math.min(...sizes.map((s) => s.memoryRequestBytes)) : 1,
  };
  return { tenancy: config.tenancy, granule, ...extra };
}

/** Phases whose compute counts against the budget. Paused released its compute; terminal is done. */
export function holdsCapacity(phase: Sandbox["phase"]): boolean {
  return !TERMINAL_PHASES.has(phase) && phase !== "Paused";
}
