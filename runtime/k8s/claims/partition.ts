// Which ready warm pods this replica may claim by an in-memory decision. Pods are split by
// rendezvous (highest random weight) hashing of the pod name over the live replicas of the
// budget shares document: every replica computes the same owner from the same member list,
// and a member joining or leaving moves only the pods it gains or loses. Pure apart from the
// state it keeps; time is passed in (monotonic ms).
//
// Why a phase: replicas read the document at different moments, and a claim decided in memory
// is written a moment later. When the member list changes, a replica claims for one phase only
// the pods it owns under both the old and the new list; only after the phase does the new list
// alone decide. A pod that moves from A to B is thus claimed by neither during the phase, so
// A's claims on it have landed (or timed out, see claimTimeoutMs) before B may take it: two
// replicas never both believe they own a pod while either has a claim unwritten. The guarded
// pod patch stays the arbiter if that timing assumption ever breaks.

/** 32-bit FNV-1a followed by murmur3's finaliser, so near-identical names spread evenly. */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The replica that owns podName among members (rendezvous hash); undefined when there are none. */
export function decideOwner(podName: string, members: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestScore = -1;
  for (const m of members) {
    const score = hash32(`${m}\n${podName}`);
    // ties (astronomically rare) go to the smaller id, so every replica agrees
    if (score > bestScore || (score === bestScore && best !== undefined && m < best)) {
      best = m;
      bestScore = score;
    }
  }
  return best;
}

export interface PartitionState {
  /** the member list that decides, once settled */
  members: readonly string[];
  /** a newer member list in its phase: until it ends, a pod must be ours under both */
  next?: { members: readonly string[]; sinceMs: number };
}

export class ClaimPartition {
  /** nothing observed yet: an empty list owns nothing, so a fresh replica waits a phase too */
  private state: PartitionState = { members: [] };

  constructor(private readonly o: { self: string; phaseMs: number }) {}

  /**
   * The live (non-retired) replicas the shares document lists at nowMs. A replica the document
   * does not list (not written yet, or removed) owns nothing: the others do not count it either.
   */
  observe(live: readonly string[], nowMs: number): void {
    const members = normalise([...live]);
    this.settle(nowMs);
    const latest = this.state.next?.members ?? this.state.members;
    if (same(latest, members)) return;
    this.state = { members: this.state.members, next: { members, sinceMs: nowMs } };
  }

  /** true when this replica alone may claim podName at nowMs */
  owns(podName: string, nowMs: number): boolean {
    this.settle(nowMs);
    const { members, next } = this.state;
    if (decideOwner(podName, members) !== this.o.self) return false;
    return !next || decideOwner(podName, next.members) === this.o.self;
  }

  snapshot(nowMs: number): PartitionState {
    this.settle(nowMs);
    return this.state;
  }

  private settle(nowMs: number): void {
    const next = this.state.next;
    if (next && nowMs - next.sinceMs >= this.o.phaseMs) this.state = { members: next.members };
  }
}

function normalise(ids: string[]): string[] {
  return [...new Set(ids)].sort();
}

function same(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
