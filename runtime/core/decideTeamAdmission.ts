// The team half of admission, as pure functions (docs/tenancy.md): one decision per create from
// numbers the caller holds in memory, in this order:
//   1. the team's own hard limits (live sandboxes, CPU and memory requests): team_quota;
//   2. its creates-per-minute token bucket: team_rate, with the exact wait until a token is there;
//   3. the global budget (this replica's share of it), less the room kept for the unused
//      guarantees of the other teams: global_budget. A team inside its guarantee always fits
//      there, because every other team left that room; a team past it takes only slack.
// The bucket counts in 1/60,000 of a token, so one millisecond at r creates per minute adds
// exactly r units: the wait it reports is an integer number of milliseconds after which a
// token is there, with no rounding to betray a caller who obeys its Retry-After.

export interface Vec {
  cpuMillis: number;
  memoryBytes: number;
}

export interface TeamUse extends Vec {
  sandboxes: number;
}

export type TeamRefusal = "team_quota" | "team_rate" | "global_budget";

export interface TeamLimitVec {
  sandboxes?: number;
  cpuMillis?: number;
  memoryBytes?: number;
}

/** A token bucket's state: level in 1/60,000 of a token, as of atMs (whole ms). */
export interface Bucket {
  level: number;
  atMs: number;
}

export interface BucketRate {
  perMinute: number;
  /** the most tokens the bucket holds */
  burst: number;
  /** what one create takes, in units; default TOKEN. With n replicas each bucket charges n tokens: the rate split n ways, exactly */
  cost?: number;
}

export interface TeamAdmitInput {
  request: Vec;
  /** the team's hard limits as this replica may use them (its part of them when replicas share) */
  limits: TeamLimitVec;
  /** what the team holds here */
  teamUsed: TeamUse;
  /** the global check: this replica's share of the budget (or the budget) and what it holds */
  limit: Vec;
  used: Vec;
  /** room kept for the other teams' unused guarantees (decideReserve) */
  reserved: Vec;
  /** the team's bucket refilled to now, and its rate; absent: no rate limit */
  bucket?: { state: Bucket; rate: BucketRate };
}

export type TeamAdmitDecision =
  | { admit: true }
  | { admit: false; reason: TeamRefusal; short: string[]; retryAfterMs?: number };

export const TOKEN = 60_000;
const DIMS = ["cpuMillis", "memoryBytes"] as const;

export function decideTeamAdmission(i: TeamAdmitInput): TeamAdmitDecision {
  const short: string[] = [];
  const l = i.limits;
  if (l.sandboxes !== undefined && i.teamUsed.sandboxes + 1 > l.sandboxes) short.push("sandboxes");
  for (const d of DIMS) {
    const lim = l[d];
    if (lim !== undefined && i.teamUsed[d] + i.request[d] > lim) short.push(d === "cpuMillis" ? "cpu" : "memory");
  }
  if (short.length > 0) return { admit: false, reason: "team_quota", short };
  const wait = i.bucket ? bucketWaitMs(i.bucket.state, i.bucket.rate) : 0;
  if (wait > 0) return { admit: false, reason: "team_rate", short: ["creates_per_minute"], retryAfterMs: wait };
  for (const d of DIMS)
    if (i.used[d] + i.request[d] + i.reserved[d] > i.limit[d]) short.push(d === "cpuMillis" ? "cpu" : "memory");
  if (short.length > 0) return { admit: false, reason: "global_budget", short };
  return { admit: true };
}

/** The bucket at nowMs: refilled by the whole milliseconds since atMs, never past burst. */
export function refillBucket(b: Bucket, rate: BucketRate, nowMs: number): Bucket {
  const t = Math.floor(nowMs);
  if (t <= b.atMs) return b;
  return { level: Math.min(capacity(rate), b.level + (t - b.atMs) * rate.perMinute), atMs: t };
}

/** burst tokens, but never less than one create: a bucket split between more replicas than burst must still admit */
function capacity(rate: BucketRate): number {
  return Math.max(rate.burst * TOKEN, rate.cost ?? TOKEN);
}

/** A full bucket: a team starts able to burst. */
export function fullBucket(rate: BucketRate, nowMs: number): Bucket {
  return { level: capacity(rate), atMs: Math.floor(nowMs) };
}

/** Milliseconds until the bucket holds what a create takes (0: it does now). */
export function bucketWaitMs(b: Bucket, rate: BucketRate): number {
  const cost = rate.cost ?? TOKEN;
  return b.level >= cost ? 0 : Math.ceil((cost - b.level) / rate.perMinute);
}

export function takeToken(b: Bucket, rate: BucketRate): Bucket {
  return { level: b.level - (rate.cost ?? TOKEN), atMs: b.atMs };
}

export interface ReserveInput {
  /** the requesting team: its own unused guarantee is not kept from it */
  team: string;
  /** every team's guarantee */
  guarantees: Record<string, Vec>;
  /** every team's use, across replicas as far as this one knows */
  used: ReadonlyMap<string, Vec>;
  /**
   * every team's use on this replica (with several replicas). A replica then keeps its part of a
   * guarantee less what the team holds here, not its part of what is unused everywhere (below).
   */
  usedHere?: ReadonlyMap<string, Vec>;
  /** this replica's share of the budget over the whole budget, per resource (1 when not shared) */
  scale: Vec;
  /** the smallest request a create can make: a reserve below it could not be used, so it is rounded up */
  granule: Vec;
}

/**
 * The room to keep for the other teams' unused guarantees, as this replica's part of it. Each
 * team's part is rounded up to whole granules: with several replicas a guarantee split into
 * fractions of a sandbox would leave the team short of it by a sandbox per replica. Rounding up
 * keeps slightly more than the guarantee from the slack (at most a granule per team), never less.
 *
 * With usedHere, a replica keeps (its share x the guarantee) less the team's use here, capped at
 * what is unused everywhere. Keeping "its share x what is unused everywhere" instead leaks: once
 * the team has filled one replica's part (that replica is full), the others shrink their parts as
 * its use grows, and the rest of the slack fills what the team still needs: it stayed a few
 * sandboxes short of its guarantee over three replicas (test/k8s/tenancy/teams.test.ts). This
 * way the parts kept add up to at least the unused guarantee however the team's creates spread;
 * the cost is slack kept idle where the team holds more than its part on another replica.
 */
export function decideReserve(i: ReserveInput): Vec {
  const out = { cpuMillis: 0, memoryBytes: 0 };
  for (const [team, g] of Object.entries(i.guarantees)) {
    if (team === i.team) continue;
    const u = i.used.get(team);
    for (const d of DIMS) {
      const unused = Math.max(0, g[d] - (u?.[d] ?? 0));
      if (unused === 0) continue;
      const scale = Math.min(1, Math.max(0, i.scale[d]));
      const part = i.usedHere ? Math.max(0, g[d] * scale - (i.usedHere.get(team)?.[d] ?? 0)) : unused * scale;
      const gr = Math.max(1, i.granule[d]);
      out[d] += Math.min(unused, Math.ceil(part / gr) * gr);
    }
  }
  return out;
}
