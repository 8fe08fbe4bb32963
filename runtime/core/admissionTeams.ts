// What admission keeps per team (docs/tenancy.md): each team's reservations here, its token
// bucket, and the numbers decideTeamAdmission needs, all in memory and synchronous like the rest
// of Admission, so a team's decision costs a few map lookups and no await.
//
// With several replicas (runtime/k8s/budget) the scope gives this replica's part of each team's
// hard limits (held in the shares Lease like the global budget, so the parts never sum past a
// limit) and what the other replicas hold per team (for the reserve of unused guarantees). A
// team's bucket here refills at its rate divided by the live replicas, so together they admit
// no faster than the team's rate.
import type { TeamLimits, TenancyConfig } from "../config/tenancy.ts";
import { teamOfSandbox } from "../config/tenancy.ts";
import {
  type Bucket,
  type BucketRate,
  decideReserve,
  decideTeamAdmission,
  fullBucket,
  refillBucket,
  type TeamAdmitDecision,
  type TeamLimitVec,
  type TeamUse,
  TOKEN,
  takeToken,
  type Vec,
} from "./decideTeamAdmission.ts";

/** What a shared budget tells the team half (absent: one replica, the whole of every limit). */
/** No team can be named this (TEAM_NAME_RE): the requester of kept(), whose own guarantee is none. */
const NO_TEAM = "";

export interface TeamScope {
  /** this replica's part of the team's hard limits; undefined: the whole configured limits */
  teamLimits?(team: string): TeamLimitVec | undefined;
  /** what the other live replicas (and the dead ones' sandboxes) hold, per team, as last seen */
  elsewhere?(): ReadonlyMap<string, TeamUse>;
  /** replicas sharing the budget now, this one included (each bucket refills at rate / replicas) */
  replicas?(): number;
  /**
   * What the replicas' shares split: the budget less what dead replicas' sandboxes hold. This
   * replica keeps share / available of each unused guarantee, so the parts kept add up to it.
   */
  available?(): Vec;
}

export interface TeamUsage {
  team: string;
  used: TeamUse;
  /** across replicas, as far as this one knows (equal to used with one replica) */
  usedEverywhere: TeamUse;
  limits: TeamLimits;
  guarantee?: Vec;
  /** tokens in this replica's bucket now (with a rate limit) */
  tokens?: number;
  /** refused creates since start, by reason */
  rejected: Record<string, number>;
}

const zeroUse = (): TeamUse => ({ sandboxes: 0, cpuMillis: 0, memoryBytes: 0 });

/** The name of a team limit's dimension in the shares Lease (runtime/k8s/budget/sharePlan.ts). */
export const teamDim = (team: string, what: "sandboxes" | "cpu" | "memory") => `${team}/${what}`;

/** Every configured team limit as a dimension of the shared budget: what the replicas split. */
export function teamLimitDims(t: TenancyConfig): Record<string, number> {
  const out: Record<string, number> = {};
  for (const team of Object.values(t.teams)) {
    const l = team.limits;
    if (l.sandboxes !== undefined) out[teamDim(team.name, "sandboxes")] = l.sandboxes;
    if (l.cpuMillis !== undefined) out[teamDim(team.name, "cpu")] = l.cpuMillis;
    if (l.memoryBytes !== undefined) out[teamDim(team.name, "memory")] = l.memoryBytes;
  }
  return out;
}

/** Uses per team as dimensions (all three per team; the ledger reads only the limited ones). */
export function useDims(used: ReadonlyMap<string, TeamUse>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [team, u] of used) {
    out[teamDim(team, "sandboxes")] = u.sandboxes;
    out[teamDim(team, "cpu")] = u.cpuMillis;
    out[teamDim(team, "memory")] = u.memoryBytes;
  }
  return out;
}

/** This replica's part of a team's limits read from its share's dimensions; undefined for a team without limits. */
export function teamLimitsFromDims(
  t: TenancyConfig,
  team: string,
  dims: Record<string, number> | undefined,
): TeamLimitVec | undefined {
  const l = t.teams[team]?.limits;
  if (!l) return undefined;
  const part = (what: "sandboxes" | "cpu" | "memory", configured: number | undefined) =>
    configured === undefined ? undefined : (dims?.[teamDim(team, what)] ?? 0);
  return {
    sandboxes: part("sandboxes", l.sandboxes),
    cpuMillis: part("cpu", l.cpuMillis),
    memoryBytes: part("memory", l.memoryBytes),
  };
}

export class TeamAdmission {
  private readonly used = new Map<string, TeamUse>();
  private readonly buckets = new Map<string, Bucket>();
  private readonly rejected = new Map<string, Record<string, number>>();
  private readonly guarantees: Record<string, Vec> = {};
  scope: TeamScope = {};

  constructor(
    readonly tenancy: TenancyConfig,
    private readonly o: { nowMs: () => number; granule: Vec },
  ) {
    for (const t of Object.values(tenancy.teams)) if (t.guarantee) this.guarantees[t.name] = t.guarantee;
  }

  teamOf(s: { owner?: string; metadata?: Record<string, string> }): string {
    return teamOfSandbox(this.tenancy, s);
  }

  /** The decision for one create of `team`; on admit the team's token is taken. */
  decide(team: string, request: Vec, global: { limit: Vec; used: Vec; total: Vec }): TeamAdmitDecision {
    const rate = this.rateOf(team);
    let bucket: Bucket | undefined;
    if (rate) {
      bucket = refillBucket(this.buckets.get(team) ?? fullBucket(rate, this.o.nowMs()), rate, this.o.nowMs());
      this.buckets.set(team, bucket);
    }
    const d = decideTeamAdmission({
      request,
      limits: this.limitsHere(team),
      teamUsed: this.used.get(team) ?? zeroUse(),
      limit: global.limit,
      used: global.used,
      reserved: this.reserveFor(team, global),
      ...(rate && bucket ? { bucket: { state: bucket, rate } } : {}),
    });
    if (d.admit && rate && bucket) this.buckets.set(team, takeToken(bucket, rate));
    if (!d.admit) {
      const r = this.rejected.get(team) ?? {};
      r[d.reason] = (r[d.reason] ?? 0) + 1;
      this.rejected.set(team, r);
    }
    return d;
  }

  add(team: string, cpuMillis: number, memoryBytes: number): void {
    const u = this.used.get(team) ?? zeroUse();
    u.sandboxes += 1;
    u.cpuMillis += cpuMillis;
    u.memoryBytes += memoryBytes;
    this.used.set(team, u);
  }

  remove(team: string, cpuMillis: number, memoryBytes: number): void {
    const u = this.used.get(team);
    if (!u) return;
    u.sandboxes -= 1;
    u.cpuMillis -= cpuMillis;
    u.memoryBytes -= memoryBytes;
  }

  /** Reservations here per team: what the shares Lease publishes for this replica. */
  usedHere(): ReadonlyMap<string, TeamUse> {
    return this.used;
  }

  /** Every configured team (and any other with a reservation), or only `team`. */
  usage(only?: string): TeamUsage[] {
    const names = new Set([...Object.keys(this.tenancy.teams), this.tenancy.defaultTeam, ...this.used.keys()]);
    const elsewhere = this.scope.elsewhere?.() ?? new Map<string, TeamUse>();
    return [...names]
      .filter((n) => only === undefined || n === only)
      .sort()
      .map((team) => {
        const here = { ...(this.used.get(team) ?? zeroUse()) };
        const there = elsewhere.get(team) ?? zeroUse();
        const rate = this.rateOf(team);
        const b = this.buckets.get(team);
        return {
          team,
          used: here,
          usedEverywhere: {
            sandboxes: here.sandboxes + there.sandboxes,
            cpuMillis: here.cpuMillis + there.cpuMillis,
            memoryBytes: here.memoryBytes + there.memoryBytes,
          },
          limits: this.tenancy.teams[team]?.limits ?? {},
          ...(this.guarantees[team] ? { guarantee: this.guarantees[team] } : {}),
          ...(rate ? { tokens: tokensOf(b ? refillBucket(b, rate, this.o.nowMs()) : undefined, rate) } : {}),
          rejected: { ...(this.rejected.get(team) ?? {}) },
        };
      });
  }

  /** The team's creates-per-minute bucket as this replica runs it: rate split between the replicas. */
  private rateOf(team: string): (BucketRate & { cost: number }) | undefined {
    const l = this.tenancy.teams[team]?.limits;
    if (!l?.createsPerMinute) return undefined;
    const n = Math.max(1, this.scope.replicas?.() ?? 1);
    return { perMinute: l.createsPerMinute, burst: l.createsBurst ?? l.createsPerMinute, cost: TOKEN * n };
  }

  private limitsHere(team: string): TeamLimitVec {
    const fromScope = this.scope.teamLimits?.(team);
    if (fromScope) return fromScope;
    const l = this.tenancy.teams[team]?.limits ?? {};
    return { sandboxes: l.sandboxes, cpuMillis: l.cpuMillis, memoryBytes: l.memoryBytes };
  }

  /**
   * The room kept here for every team's unused guarantee (what a create of a team with none
   * is refused into): the budget shares never move it to another replica (sharePlan.ts).
   */
  kept(g: { limit: Vec; total: Vec }): Vec {
    return this.reserveFor(NO_TEAM, g);
  }

  private reserveFor(team: string, g: { limit: Vec; total: Vec }): Vec {
    if (Object.keys(this.guarantees).length === 0) return { cpuMillis: 0, memoryBytes: 0 };
    const total = this.scope.available?.() ?? g.total;
    const elsewhere = this.scope.elsewhere?.();
    const used = new Map<string, Vec>();
    for (const name of Object.keys(this.guarantees)) {
      const here = this.used.get(name);
      const there = elsewhere?.get(name);
      used.set(name, {
        cpuMillis: (here?.cpuMillis ?? 0) + (there?.cpuMillis ?? 0),
        memoryBytes: (here?.memoryBytes ?? 0) + (there?.memoryBytes ?? 0),
      });
    }
    return decideReserve({
      team,
      guarantees: this.guarantees,
      used,
      ...(elsewhere ? { usedHere: this.used } : {}),
      scale: {
        cpuMillis: total.cpuMillis > 0 ? g.limit.cpuMillis / total.cpuMillis : 1,
        memoryBytes: total.memoryBytes > 0 ? g.limit.memoryBytes / total.memoryBytes : 1,
      },
      granule: this.o.granule,
    });
  }
}

function tokensOf(b: Bucket | undefined, rate: BucketRate & { cost: number }): number {
  if (!b) return rate.burst * (TOKEN / rate.cost);
  return Math.floor((b.level / rate.cost) * 100) / 100;
}
