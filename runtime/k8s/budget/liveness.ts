// Which replicas in the shares document are alive, judged by this observer alone: a replica is
// dead once its entry's beat has not changed for a whole lease, measured on this process's own
// monotonic clock from the moment this process first saw the current beat. Writers' wall-clock
// timestamps are never read, so clock skew between machines cannot expire a live replica or
// keep a dead one. Pure apart from the state it keeps; time is passed in.
import type { SharesDoc } from "./sharePlan.ts";

export class Liveness {
  private readonly seen = new Map<string, { beat: number; at: number }>();

  /** Record what the document shows at `nowMs` (monotonic). A beat seen for the first time counts as fresh. */
  observe(doc: SharesDoc, nowMs: number): void {
    for (const [id, e] of Object.entries(doc.replicas)) {
      const s = this.seen.get(id);
      if (!s || s.beat !== e.beat) this.seen.set(id, { beat: e.beat, at: nowMs });
    }
    for (const id of this.seen.keys()) if (!Object.hasOwn(doc.replicas, id)) this.seen.delete(id);
  }

  /** Replicas other than `me` whose beat has stood still for at least leaseMs. */
  expired(nowMs: number, leaseMs: number, me: string): string[] {
    const out: string[] = [];
    for (const [id, s] of this.seen) if (id !== me && nowMs - s.at >= leaseMs) out.push(id);
    return out;
  }
}

/**
 * Whether a replica may still admit: only while its last successful write is younger than the
 * lease minus a margin. The time is taken before that write was sent, and an observer starts its
 * count no earlier than when it saw the write, so the writer stops admitting before any observer
 * can declare it dead and hand its share to others (a partitioned replica fences itself).
 */
export function shouldAdmit(
  lastWriteSentAt: number | undefined,
  nowMs: number,
  leaseMs: number,
  marginMs: number,
): boolean {
  return lastWriteSentAt !== undefined && nowMs - lastWriteSentAt < leaseMs - marginMs;
}
