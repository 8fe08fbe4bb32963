// This replica's side of the shared admission budget (docs/kubernetes-runtime.md, "One budget
// across manager replicas"). A loop reads the shares Lease, judges the other replicas' liveness
// by its own monotonic clock, retires and then drops the silent, sizes this replica's share
// (sharePlan.ts) and writes it back under the Lease's resourceVersion. Admission reads limit()
// synchronously: it is never larger than the share last written, and it drops to zero when this
// replica has not managed to write for half a lease (partitioned, or the API server too slow).
//
// The lease has two phases of leaseMs/2: a replica silent for one phase is retired (its share
// still held, so accepts it had not yet written land inside it), silent for another it is
// removed and its share is free. A slow replica that finds itself retired takes its entry back.
//
// Each replica's entry is an annotation of its own (shareEntries.ts). A renewal is one JSON patch
// of that entry, tested against the value the replica last saw, so other replicas' writes never
// make it lose; so is a shrink or a change of `want`, which cannot raise the shares' sum. Only a
// write that could (a growth, retiring or removing others, the migration from the old single
// document) replaces the whole Lease under its resourceVersion.
//
// One round runs at a time (two would race each other's compare-and-swap). Each request is
// bounded (a dead connection would otherwise hold the loop for minutes), and a create that finds
// the replica fenced only because a renewal is late can wait for the round (awaitRenewal).
// Over 400 lines: the loop, the round and the write are one piece of state (the local limit,
// the last write sent, the round in flight) that a split would pass back and forth; the pure
// sizing already lives in sharePlan.ts and shareEntries.ts.
import type { CoordinationV1Api, V1Lease } from "@kubernetes/client-node";
import type { Clock } from "../../core/clock.ts";
import type { Logger } from "../../core/log.ts";
import { isConflict, isNotFound } from "../client.ts";
import { isTestFailed, LeaseRequests } from "./leaseRequests.ts";
import { Liveness, shouldAdmit } from "./liveness.ts";
import { formatEntry, ownEntryPatch, type ReadShares, readShares, TOMBSTONE, writeShares } from "./shareEntries.ts";
import {
  decideShare,
  minVec,
  retireSilent,
  type ShareEntry,
  type SharesDoc,
  type ShareVec,
  sameVec,
  sharesWithin,
  vecFinite,
  vecWithin,
} from "./sharePlan.ts";
import { SHARES_ANNOTATION } from "./sharesDoc.ts";

export interface ShareLedgerOptions {
  api: CoordinationV1Api;
  namespace: string;
  leaseName: string;
  identity: string;
  budget: ShareVec;
  /** the free room this replica keeps ahead of its used (planHeadroom) */
  headroom(replicas: number): ShareVec;
  /** what this replica's admission holds now (bound once admission exists) */
  used?: () => ShareVec;
  /** live usage admitted by none of `replicas` */
  orphans(replicas: ReadonlySet<string>): ShareVec;
  /** sleeps between rounds; now() is never read (time comes from monotonicMs) */
  clock: Clock;
  logger: Logger;
  /** a replica whose beat stood still this long has lost its share (two phases: retired, then removed) */
  leaseMs: number;
  /** how often a round runs (a read; a write only on change or renewal) */
  tickMs: number;
  /** default performance.now */
  monotonicMs?: () => number;
  /** every document read, as its live (non-retired) replica ids at monotonic atMs: the warm pool's partition */
  onReplicas?: (live: string[], atMs: number) => void;
  /** a Lease request still unanswered after this long is aborted and the round fails; default two renewal intervals */
  requestTimeoutMs?: number;
  /** the longest a create waits in awaitRenewal for a late renewal; default 2 s, at most a quarter lease */
  renewalWaitMs?: number;
}

export interface ShareStats {
  share: ShareVec;
  used: ShareVec;
  /** share changes this replica wrote, by direction */
  moves: { grow: number; shrink: number };
  /** replicas in the last document read, this one included */
  replicas: number;
  /** replicas this one retired (silent for a phase) and removed (silent for another) */
  retired: number;
  reclaimed: number;
  /** writes of the Lease this replica lost: a compare-and-swap another replica wrote in between, or a patch of its entry that someone retired or removed */
  conflicts: number;
  /** rounds that lost every compare-and-swap they tried, and so wrote nothing */
  abandoned: number;
  /** since the last write that landed was sent (monotonic ms); undefined before the first. Fenced at half a lease. */
  renewedAgoMs?: number;
  fenced: boolean;
}

const ZERO: ShareVec = { cpuMillis: 0, memoryBytes: 0 };
const CONFLICT_RETRIES = 3;
const RENEWAL_WAIT_MS = 2_000;

export class ShareLedger {
  private local: ShareVec = { ...ZERO };
  /** used at the previous round: more now means this replica is admitting */
  private lastUsed: ShareVec = { ...ZERO };
  private lastWriteSentAt?: number;
  /** this replica's entry as the server holds it (last read or written): what a renewal's patch tests */
  private own?: { raw: string; entry: ShareEntry };
  private readonly liveness = new Liveness();
  private readonly now: () => number;
  private readonly phaseMs: number;
  private readonly renewMs: number;
  private readonly stats = {
    moves: { grow: 0, shrink: 0 },
    replicas: 0,
    retired: 0,
    reclaimed: 0,
    conflicts: 0,
    abandoned: 0,
  };
  private usedOf: () => ShareVec;
  /** the room admission keeps for other teams' unused guarantees: the share never shrinks below used plus it */
  private keptOf: (share: ShareVec) => { cpuMillis: number; memoryBytes: number } = () => ZERO;
  /** replicas the round being written retires or removes (for the log and stats once it lands) */
  private pendingDead: string[] = [];
  private pendingRetired: string[] = [];
  private readonly abort = new AbortController();
  private loop?: Promise<void>;
  /** the round running now: there is never more than one */
  private current?: Promise<void>;
  /** resolves when the round running now (or, between rounds, the next one) ends */
  private roundEnd = settles();
  private lastRoundEndedAt = Number.NEGATIVE_INFINITY;
  private readonly lease: LeaseRequests;
  private readonly renewalWaitMs: number;
  /** what live sandboxes of no live replica held at the last round */
  private lastOrphans: ShareVec = { ...ZERO };

  constructor(private readonly o: ShareLedgerOptions) {
    this.now = o.monotonicMs ?? (() => performance.now());
    this.phaseMs = Math.max(2, Math.floor(o.leaseMs / 2));
    // four writes per phase: two may fail before this replica fences itself
    this.renewMs = Math.max(1, Math.floor(this.phaseMs / 4));
    this.usedOf = o.used ?? (() => ZERO);
    this.lease = new LeaseRequests({
      api: o.api,
      namespace: o.namespace,
      name: o.leaseName,
      clock: o.clock,
      timeoutMs: o.requestTimeoutMs ?? 2 * this.renewMs,
      now: this.now,
    });
    this.renewalWaitMs = Math.min(o.renewalWaitMs ?? RENEWAL_WAIT_MS, Math.floor(this.phaseMs / 2));
  }

  bindUsed(used: () => ShareVec, kept?: (share: ShareVec) => { cpuMillis: number; memoryBytes: number }): void {
    this.usedOf = used;
    if (kept) this.keptOf = kept;
  }

  /** What admission may hold now: the written share, or nothing once fenced. */
  limit(): ShareVec {
    return this.fenced() ? { ...ZERO } : this.local;
  }

  /** The budget less what no live replica's share covers (dead replicas' sandboxes): what the shares split. */
  available(): ShareVec {
    return {
      cpuMillis: Math.max(0, this.o.budget.cpuMillis - this.lastOrphans.cpuMillis),
      memoryBytes: Math.max(0, this.o.budget.memoryBytes - this.lastOrphans.memoryBytes),
    };
  }

  /** Live replicas in the last document read, this one included (at least 1). */
  replicas(): number {
    return Math.max(1, this.stats.replicas);
  }

  fenced(): boolean {
    // Fenced after half the lease: observers free the share only after the whole lease, so
    // what this replica accepted until then has the other half to be written inside it.
    return !shouldAdmit(this.lastWriteSentAt, this.now(), this.o.leaseMs, this.phaseMs);
  }

  snapshot(): ShareStats {
    return {
      share: this.limit(),
      used: this.usedOf(),
      fenced: this.fenced(),
      ...this.stats,
      moves: { ...this.stats.moves },
      renewedAgoMs: this.lastWriteSentAt === undefined ? undefined : this.now() - this.lastWriteSentAt,
    };
  }

  /**
   * For a create that found this replica fenced: when that is only because a renewal is late
   * (the share was renewed less than a whole lease ago, so no observer can have freed it yet),
   * wait for the round running now, starting one if none is (at most one every half tick, so
   * creates cannot hammer a failing API server), for at most renewalWaitMs. True when the share
   * may be trusted again; admission still makes the decision. Waiting changes nothing the fence
   * protects: a write that lands lifts the fence only until half a lease after it was sent.
   */
  async awaitRenewal(): Promise<boolean> {
    if (!this.fenced()) return true;
    const deadline = this.now() + this.renewalWaitMs;
    while (this.renewable() && this.now() < deadline) {
      const ended = this.roundEnd.promise;
      if (!this.current && this.now() - this.lastRoundEndedAt >= this.o.tickMs / 2) void this.roundOnce();
      const stop = new AbortController();
      const timedOut = this.o.clock.sleep(Math.max(0, deadline - this.now()), stop.signal).then(
        () => true,
        () => false,
      );
      const out = await Promise.race([ended.then(() => false), timedOut]);
      stop.abort();
      if (!this.fenced()) return true;
      if (out) break;
    }
    return !this.fenced();
  }

  /** Not stopped, and renewed (a write that landed was sent) less than a lease ago: no observer can have dropped the share. */
  private renewable(): boolean {
    return (
      !this.abort.signal.aborted &&
      this.lastWriteSentAt !== undefined &&
      this.now() - this.lastWriteSentAt < this.o.leaseMs
    );
  }

  /** First round before returning, so a replica starts with a share; then a round every tickMs. */
  async start(): Promise<void> {
    await this.roundOnce("first share round failed");
    this.loop = this.run();
  }

  /** Stops the loop and gives the share back: this replica's sandboxes count as orphans from now on. */
  async close(): Promise<void> {
    await this.stop();
    this.local = { ...ZERO };
    try {
      await this.cas((doc) => {
        delete doc.replicas[this.o.identity];
        return true;
      });
    } catch (err) {
      this.o.logger.warn(
        { op: "budget-shares", err },
        "could not give the budget share back; it expires with the lease",
      );
    }
  }

  /** Stops without giving anything back, as a killed process would (crash tests). */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    await this.current;
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      try {
        await this.o.clock.sleep(this.o.tickMs, signal);
      } catch {
        return; // aborted
      }
      await this.roundOnce();
    }
  }

  /** The round running now, or a new one; it never rejects (a failed round is logged, the next tries again). */
  private roundOnce(failed = "share round failed; retrying"): Promise<void> {
    if (this.current) return this.current;
    const started = this.now();
    const p = this.round()
      .then(
        () => this.logSlow(started),
        (err) => this.o.logger.warn({ op: "budget-shares", err: String((err as Error)?.message ?? err) }, failed),
      )
      .finally(() => {
        this.current = undefined;
        this.lastRoundEndedAt = this.now();
        const ended = this.roundEnd;
        this.roundEnd = settles();
        ended.resolve();
      });
    this.current = p;
    return p;
  }

  /** A round that took longer than a renewal interval: the API server (or this process) is slow; say where the time went. */
  private logSlow(started: number): void {
    const ms = this.now() - started;
    if (ms < this.renewMs) return;
    this.o.logger.info(
      {
        op: "budget-shares",
        ms: Math.round(ms),
        requests: this.lease.take(),
        renewedAgoMs: this.lastWriteSentAt === undefined ? undefined : Math.round(this.now() - this.lastWriteSentAt),
        fenceAfterMs: this.o.leaseMs - this.phaseMs,
      },
      "a budget-share round took longer than a renewal interval",
    );
  }

  /**
   * One round: read, reclaim the dead, size our share, write if anything changed or renewal is
   * due. A lost compare-and-swap is retried at once from a fresh read; a round that loses every
   * try writes nothing (the next tick tries again), and says so: rounds lost in a row bring the
   * replica towards its fence.
   */
  async round(): Promise<void> {
    this.lease.take(); // the slow-round log shows this round's requests only
    let fresh = await this.renew();
    const renewed = fresh !== undefined; // the renewal landed: the rest of the round writes only a change
    for (let attempt = 0; attempt <= CONFLICT_RETRIES; attempt++) {
      try {
        await this.cas((doc, at) => this.plan(doc, at, renewed), fresh);
        return;
      } catch (err) {
        fresh = undefined;
        if (!isConflict(err) && !isTestFailed(err)) throw err;
        this.stats.conflicts++;
      }
    }
    this.stats.abandoned++;
    const ago = this.lastWriteSentAt === undefined ? undefined : Math.round(this.now() - this.lastWriteSentAt);
    this.o.logger.warn(
      {
        op: "budget-shares",
        tries: CONFLICT_RETRIES + 1,
        renewedAgoMs: ago,
        fenceAfterMs: this.o.leaseMs - this.phaseMs,
      },
      "every compare-and-swap of the budget shares lost to another replica's write this round; trying again next tick",
    );
  }

  /**
   * A renewal that is due, as one request: a JSON patch of this replica's own entry (beat and
   * used; share and want as they were), tested against the value it last saw, so no other
   * replica's write can make it lose, and with no read before it. Answers the Lease the server
   * returned (the round plans on it), or undefined when there is nothing to renew this way or the
   * entry changed under it (retired or removed: the round's whole write takes it back).
   */
  private async renew(): Promise<V1Lease | undefined> {
    const own = this.own;
    if (!own || own.entry.retired || !this.renewDue(this.now())) return undefined;
    const me = this.o.identity;
    const next: ShareEntry = { ...own.entry, used: this.usedOf(), beat: own.entry.beat + 1 };
    const sentAt = this.now();
    let lease: V1Lease;
    try {
      lease = await this.lease.patch(ownEntryPatch(me, own.raw, next));
    } catch (err) {
      if (!isTestFailed(err) && !isNotFound(err)) throw err;
      this.own = undefined;
      this.stats.conflicts++;
      return undefined;
    }
    this.own = { raw: formatEntry(me, next), entry: next };
    this.lastWriteSentAt = sentAt;
    return lease;
  }

  private renewDue(at: number): boolean {
    return this.lastWriteSentAt === undefined || at - this.lastWriteSentAt >= this.renewMs;
  }

  /** Mutates doc into what this replica writes; false when nothing needs writing. */
  private plan(doc: SharesDoc, at: number, renewed = false): boolean {
    const me = this.o.identity;
    this.liveness.observe(doc, at);
    const silent = this.liveness.expired(at, this.phaseMs, me);
    const { retired, removed } = retireSilent(doc, silent);
    this.pendingRetired = retired;
    this.pendingDead = removed;
    // retired replicas' records stay covered by their held share, so they are not orphans yet
    const ids = new Set([...Object.keys(doc.replicas), me]);
    const live = new Set([
      ...Object.entries(doc.replicas)
        .filter(([, e]) => !e.retired)
        .map(([id]) => id),
      me,
    ]);
    this.stats.replicas = live.size;
    const used = this.usedOf();
    const active = used.cpuMillis > this.lastUsed.cpuMillis || used.memoryBytes > this.lastUsed.memoryBytes;
    const activeDims = grownDims(used, this.lastUsed);
    this.lastUsed = used;
    const orphans = this.o.orphans(ids);
    this.lastOrphans = orphans;
    const decision = decideShare({
      active,
      activeDims,
      me,
      budget: this.o.budget,
      doc,
      orphans,
      used,
      kept: this.keptOf(doc.replicas[me]?.share ?? ZERO),
      headroom: this.o.headroom(live.size),
    });
    const cur = doc.replicas[me];
    if (!this.safeToGrow(doc, cur?.share, decision.share, orphans)) decision.share = { ...(cur?.share ?? ZERO) };
    // never admit past a smaller share while it is being written
    this.local = minVec(this.local, decision.share);
    const changed =
      !cur ||
      cur.retired ||
      !sameVec(cur.share, decision.share) ||
      cur.want !== decision.want ||
      String(cur.wantDims ?? []) !== String(decision.wantDims ?? []);
    const renewDue = !renewed && this.renewDue(at);
    if (!changed && !renewDue && silent.length === 0 && sameVec(this.local, decision.share)) return false;
    doc.replicas[me] = {
      share: decision.share,
      used,
      want: decision.want,
      beat: (cur?.beat ?? 0) + 1,
      ...(decision.wantDims ? { wantDims: decision.wantDims } : {}),
    };
    return true;
  }

  /**
   * Belt and braces: a growth that would put the shares plus orphans past the budget, or a share
   * that is not a finite number, is a bug in the rules; it is logged and not written.
   */
  private safeToGrow(doc: SharesDoc, before: ShareVec | undefined, next: ShareVec, orphans: ShareVec): boolean {
    const b = before ?? ZERO;
    const finite = vecFinite(next);
    if (finite && vecWithin(next, b)) return true;
    const replicas = { ...doc.replicas, [this.o.identity]: { share: next, used: ZERO, want: false, beat: 0 } };
    if (finite && sharesWithin({ replicas }, orphans, this.o.budget)) return true;
    this.o.logger.error(
      { op: "budget-shares", before: b, next, orphans, doc },
      "refusing a budget share that would put the shares past the budget; this is a bug, keeping the share it had",
    );
    return false;
  }

  /**
   * Read (or take the Lease a renewal just answered), mutate, write: a patch of this replica's own
   * entry when the change cannot raise the shares' sum, else a replace under the resourceVersion.
   * A lost write (409, or 422 when the entry changed since it was read) propagates to the caller.
   */
  private async cas(mutate: (doc: SharesDoc, atMs: number) => boolean, fresh?: V1Lease): Promise<void> {
    const lease = fresh ?? (await this.readOrCreate());
    const read = readShares(lease.metadata?.annotations);
    const { doc } = read;
    const me = this.o.identity;
    this.own = read.raw[me] === undefined ? undefined : { raw: read.raw[me], entry: doc.replicas[me] };
    this.o.onReplicas?.(
      Object.keys(doc.replicas).filter((id) => !doc.replicas[id].retired),
      this.now(),
    );
    const before = doc.replicas[me];
    this.pendingDead = [];
    this.pendingRetired = [];
    if (!mutate(doc, this.now())) return;
    const sentAt = this.now();
    const after = doc.replicas[me];
    if (this.ownOnly(read, before, after)) {
      await this.lease.patch(ownEntryPatch(me, read.raw[me], after));
    } else {
      const annotations = writeShares(lease.metadata?.annotations, doc);
      await this.lease.replace({ ...lease, metadata: { ...lease.metadata, annotations } });
    }
    this.written(doc, before?.share, sentAt);
  }

  /** The write changes only this replica's live entry and cannot raise its share: a patch may carry it. */
  private ownOnly(read: ReadShares, before: ShareEntry | undefined, after: ShareEntry | undefined): boolean {
    if (read.legacy || !before || before.retired || read.raw[this.o.identity] === undefined) return false;
    if (this.pendingDead.length > 0 || this.pendingRetired.length > 0) return false;
    if (!after) return true;
    return vecWithin(after.share, before.share);
  }

  private async readOrCreate(): Promise<V1Lease> {
    const { namespace, leaseName: name } = this.o;
    try {
      return await this.lease.read();
    } catch (err) {
      if (!isNotFound(err)) throw err;
      return this.lease.create({
        metadata: { name, namespace, annotations: { [SHARES_ANNOTATION]: TOMBSTONE } },
        spec: { holderIdentity: "sbx-budget-shares" },
      });
    }
  }

  private written(doc: SharesDoc, before: ShareVec | undefined, sentAt: number): void {
    const mine = doc.replicas[this.o.identity];
    this.own = mine ? { raw: formatEntry(this.o.identity, mine), entry: mine } : undefined;
    if (!mine) return;
    this.lastWriteSentAt = sentAt;
    this.local = mine.share;
    if (this.pendingRetired.length > 0) {
      this.stats.retired += this.pendingRetired.length;
      this.o.logger.warn(
        { op: "budget-shares", replicas: this.pendingRetired },
        "replicas stopped renewing their budget share for half a lease; retired: their shares stay held for the other half",
      );
    }
    if (this.pendingDead.length > 0) {
      this.stats.reclaimed += this.pendingDead.length;
      this.o.logger.warn(
        { op: "budget-shares", replicas: this.pendingDead },
        "replicas stopped renewing their budget share for a whole lease; their shares are free and their sandboxes count from the live records",
      );
    }
    const b = before ?? ZERO;
    if (sameVec(mine.share, b)) return;
    if (!vecWithin(mine.share, b)) this.stats.moves.grow++;
    else this.stats.moves.shrink++;
    this.o.logger.info(
      {
        op: "budget-shares",
        from: b,
        to: mine.share,
        used: mine.used,
        want: mine.want,
        replicas: Object.keys(doc.replicas),
      },
      "budget share moved",
    );
  }
}

/** The team dimensions whose use grew since the last round: those the replica is admitting into. */
function grownDims(used: ShareVec, last: ShareVec): Set<string> {
  const out = new Set<string>();
  for (const [k, x] of Object.entries(used.dims ?? {})) if (x > (last.dims?.[k] ?? 0)) out.add(k);
  return out;
}

/** A promise and its resolve: what awaitRenewal waits on (the end of a round). */
function settles(): { promise: Promise<void>; resolve: () => void } {
  let resolve = () => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
