// How one manager replica sizes its share of the admission budget. Pure: the ledger
// (ledger.ts) reads the shares document, judges liveness, and writes what this decides.
//
// The rules, per resource (CPU and memory alike):
// - avail = budget - orphans: what live sandboxes of no live replica hold comes off the top;
// - at rest every replica holds its fair part, avail / live replicas, so a burst that arrives
//   everywhere at once is admitted in full without waiting for a share to move;
// - a replica under pressure (its used + headroom exceeds its share) sets `want`;
// - while another replica wants, an idle replica shrinks to its used + headroom and one that is
//   admitting (or is past its fair part) to its fair part, never below what it already admitted:
//   nothing stays stranded, and a burst that hits every replica at once loses nothing in transit;
// - a replica grows only out of the room nobody holds, so the shares never sum past avail.
// A replica only ever changes its own entry, and lowers its local limit before it writes a
// smaller share and raises it only after a larger one was written: its admission never runs
// ahead of the share the others can see.
//
// Team limits (config.tenancy, docs/tenancy.md) ride along as extra dimensions, `dims`, one per
// team and limited resource ("<team>/sandboxes", "<team>/cpu", "<team>/memory"), split by the
// same rules and so under the same invariant: the shares of a team's limit never sum past it.
// Two differences: `want` and `active` are per dimension (wantDims), so a team's demand moves
// that team's limit and not the budget; and the fair part hands out the remainder one unit per
// replica in id order, so a limit of 200 sandboxes over three replicas is 67+67+66, not 3 x 66.

export interface ShareVec {
  cpuMillis: number;
  memoryBytes: number;
  /** the team limits' parts, by dimension name (absent: no team limits) */
  dims?: Record<string, number>;
}

export interface ShareEntry {
  /** what this replica may admit */
  share: ShareVec;
  /** what it had reserved when it wrote (for observers; admission reads its own, live) */
  used: ShareVec;
  /** under pressure: it needs more than its share and asks idle replicas to give back */
  want: boolean;
  /** bumped on every write by its replica: observers judge liveness by its changes */
  beat: number;
  /** the team dimensions it needs more of (want, per dimension) */
  wantDims?: string[];
  /**
   * Declared silent by an observer: the share stays held for one more phase, so records the
   * replica had accepted but not yet written still land inside it; then the entry goes. A
   * replica that finds its own entry retired was only slow: it takes it back.
   */
  retired?: boolean;
}

export interface SharesDoc {
  replicas: Record<string, ShareEntry>;
}

export interface ShareInput {
  me: string;
  budget: ShareVec;
  /** the document without the replicas judged dead */
  doc: SharesDoc;
  /** live usage admitted by no replica in doc (nor me): dead replicas' sandboxes, older records */
  orphans: ShareVec;
  /** what this replica's admission holds now */
  used: ShareVec;
  /**
   * Free room this replica must keep for other teams' unused guarantees (decideReserve): it never
   * gives that away. A share moved from a replica whose room backs a guarantee to one whose part
   * of it is already used would turn that room into slack for the other teams, and the
   * guaranteed team would find the budget full (test/k8s/tenancy/teams.test.ts saw 197 of 200).
   */
  kept?: { cpuMillis: number; memoryBytes: number };
  /** the free room a replica keeps ahead of its used, so it admits while a move is under way */
  headroom: ShareVec;
  /** this replica admitted since its last round: it keeps its fair part even when others want */
  active?: boolean;
  /** the team dimensions whose use grew since its last round */
  activeDims?: ReadonlySet<string>;
}

export interface ShareDecision {
  share: ShareVec;
  want: boolean;
  wantDims?: string[];
}

/** The shares Lease's name, derived from the controller Lease's so RBAC needs no new setting. */
export function sharesLeaseName(controllerLeaseName: string): string {
  return `${controllerLeaseName}-shares`;
}

const DIMS = ["cpuMillis", "memoryBytes"] as const;

export function decideShare(i: ShareInput): ShareDecision {
  const entries = Object.entries(i.doc.replicas).filter(([id]) => id !== i.me);
  // retired entries still hold their share but take no fair part and ask for nothing
  const others = entries.filter(([, e]) => !e.retired);
  const othersWant = others.some(([, e]) => e.want);
  const current = i.doc.replicas[i.me]?.share ?? { cpuMillis: 0, memoryBytes: 0 };
  const share = { cpuMillis: 0, memoryBytes: 0 };
  let want = false;
  for (const d of DIMS) {
    const avail = Math.max(0, i.budget[d] - i.orphans[d]);
    const fair = Math.floor(avail / (others.length + 1));
    const othersHold = entries.reduce((sum, [, e]) => sum + e.share[d], 0);
    const room = avail - othersHold - current[d];
    // what may not be given away: the admitted sandboxes and the room kept for guarantees
    const used = i.used[d] + (i.kept?.[d] ?? 0);
    const need = used + i.headroom[d];
    const keep = i.active ? fair : Math.min(need, fair);
    const desired = othersWant ? Math.max(used, keep) : Math.max(need, fair);
    let next = desired <= current[d] ? Math.max(desired, used) : current[d] + Math.min(desired - current[d], room);
    // orphans grew past what was free (a replica died holding sandboxes): give back what we can
    if (room < 0) next = Math.max(used, Math.min(next, current[d] + room));
    share[d] = Math.max(0, next);
    if (need > share[d]) want = true;
  }
  if (!i.budget.dims) return { share, want };
  const { dims, wantDims } = decideDims(i, entries);
  return { share: { ...share, dims }, want, ...(wantDims.length > 0 ? { wantDims } : {}) };
}

/** The team dimensions, by the same rules with per-dimension want and activity (see the header). */
function decideDims(
  i: ShareInput,
  entries: [string, ShareEntry][],
): { dims: Record<string, number>; wantDims: string[] } {
  const others = entries.filter(([, e]) => !e.retired);
  const ids = [i.me, ...others.map(([id]) => id)].sort();
  const rank = ids.indexOf(i.me);
  const current = i.doc.replicas[i.me]?.share.dims ?? {};
  const dims: Record<string, number> = {};
  const wantDims: string[] = [];
  for (const [d, budget] of Object.entries(i.budget.dims ?? {})) {
    const avail = Math.max(0, budget - (i.orphans.dims?.[d] ?? 0));
    const fair = Math.floor(avail / ids.length) + (rank < avail % ids.length ? 1 : 0);
    const othersHold = entries.reduce((sum, [, e]) => sum + (e.share.dims?.[d] ?? 0), 0);
    const cur = current[d] ?? 0;
    const room = avail - othersHold - cur;
    const used = i.used.dims?.[d] ?? 0;
    const need = used + (i.headroom.dims?.[d] ?? 0);
    const othersWant = others.some(([, e]) => e.wantDims?.includes(d));
    const keep = i.activeDims?.has(d) ? fair : Math.min(need, fair);
    const desired = othersWant ? Math.max(used, keep) : Math.max(need, fair);
    let next = desired <= cur ? Math.max(desired, used) : cur + Math.min(desired - cur, room);
    if (room < 0) next = Math.max(used, Math.min(next, cur + room));
    dims[d] = Math.max(0, next);
    if (need > dims[d]) wantDims.push(d);
  }
  return { dims, wantDims };
}

/**
 * The free room to keep: a fraction of the fair part. Never more than that fraction: a headroom
 * near the fair part would have idle replicas keep (and busy ones ask for) whole fair parts, and
 * nothing would move to where the demand is.
 */
export function planHeadroom(budget: ShareVec, replicas: number, fraction: number): ShareVec {
  const n = Math.max(1, replicas);
  const head = (x: number) => Math.max(1, Math.ceil((x / n) * fraction));
  return {
    cpuMillis: head(budget.cpuMillis),
    memoryBytes: head(budget.memoryBytes),
    ...(budget.dims ? { dims: mapDims(budget.dims, head) } : {}),
  };
}

function mapDims(d: Record<string, number>, f: (x: number, k: string) => number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, x] of Object.entries(d)) out[k] = f(x, k);
  return out;
}

/**
 * What to do with replicas silent for a phase (mutates doc): retire the live ones (share held,
 * beat bumped so every observer starts the second phase when it sees the tombstone), remove the
 * already retired ones (their share is free; their records count as orphans from now on).
 */
export function retireSilent(doc: SharesDoc, silent: readonly string[]): { retired: string[]; removed: string[] } {
  const retired: string[] = [];
  const removed: string[] = [];
  for (const id of silent) {
    const e = doc.replicas[id];
    if (!e) continue;
    if (e.retired) {
      delete doc.replicas[id];
      removed.push(id);
    } else {
      doc.replicas[id] = { ...e, retired: true, want: false, beat: e.beat + 1 };
      retired.push(id);
    }
  }
  return { retired, removed };
}

/** Componentwise minimum: the local limit while a smaller share is being written. A dimension one side lacks is 0. */
export function minVec(a: ShareVec, b: ShareVec): ShareVec {
  const base = { cpuMillis: Math.min(a.cpuMillis, b.cpuMillis), memoryBytes: Math.min(a.memoryBytes, b.memoryBytes) };
  if (!a.dims && !b.dims) return base;
  const keys = new Set([...Object.keys(a.dims ?? {}), ...Object.keys(b.dims ?? {})]);
  const dims: Record<string, number> = {};
  for (const k of keys) dims[k] = Math.min(a.dims?.[k] ?? 0, b.dims?.[k] ?? 0);
  return { ...base, dims };
}

export function sameVec(a: ShareVec, b: ShareVec): boolean {
  if (a.cpuMillis !== b.cpuMillis || a.memoryBytes !== b.memoryBytes) return false;
  const keys = new Set([...Object.keys(a.dims ?? {}), ...Object.keys(b.dims ?? {})]);
  for (const k of keys) if ((a.dims?.[k] ?? 0) !== (b.dims?.[k] ?? 0)) return false;
  return true;
}

/** a is nowhere above b (a dimension one side lacks is 0): writing a in place of b cannot raise any sum. */
export function vecWithin(a: ShareVec, b: ShareVec): boolean {
  if (a.cpuMillis > b.cpuMillis || a.memoryBytes > b.memoryBytes) return false;
  for (const [k, x] of Object.entries(a.dims ?? {})) if (x > (b.dims?.[k] ?? 0)) return false;
  return true;
}

/** Every number in it finite: a share that is not is a bug, never written. */
export function vecFinite(a: ShareVec): boolean {
  return (
    Number.isFinite(a.cpuMillis) &&
    Number.isFinite(a.memoryBytes) &&
    Object.values(a.dims ?? {}).every((x) => Number.isFinite(x))
  );
}

/** The invariant every written document keeps: shares plus orphans within the budget. */
export function sharesWithin(doc: SharesDoc, orphans: ShareVec, budget: ShareVec): boolean {
  const base = DIMS.every(
    (d) =>
      Object.values(doc.replicas).reduce((s, e) => s + e.share[d], 0) + orphans[d] <= Math.max(budget[d], orphans[d]),
  );
  return (
    base &&
    Object.entries(budget.dims ?? {}).every(([d, b]) => {
      const o = orphans.dims?.[d] ?? 0;
      return Object.values(doc.replicas).reduce((s, e) => s + (e.share.dims?.[d] ?? 0), 0) + o <= Math.max(b, o);
    })
  );
}
