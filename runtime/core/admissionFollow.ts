// Keeps the admission budget in step with what the substrate reports: capacity comes back when
// a sandbox ends or goes, and a live sandbox nobody reserved (created by another replica,
// resumed elsewhere) is counted. An id that just ended is remembered for a while, so a late
// event cannot resurrect its reservation.
import { type Admission, holdsCapacity } from "./admission.ts";
import type { Logger } from "./log.ts";
import { type SandboxEvent, TERMINAL_PHASES } from "./types.ts";

/** How long an id we released stays barred from being re-adopted by a late event. */
const GONE_MEMORY_MS = 10 * 60_000;

export class AdmissionFollower {
  private readonly gone = new Map<string, number>();

  constructor(private readonly o: { admission: Admission; logger: Logger }) {}

  onEvent(e: SandboxEvent): void {
    const { admission, logger } = this.o;
    if (e.type === "delete") {
      if (admission.release(e.id))
        logger.info({ sandbox: e.id, owner: e.owner, op: "release" }, "sandbox gone; capacity released");
      this.ended(e.id);
      return;
    }
    const s = e.sandbox;
    if (!holdsCapacity(s.phase)) {
      if (admission.release(s.id))
        logger.info(
          { sandbox: s.id, owner: s.owner, op: "release", phase: s.phase, reason: s.reason },
          "sandbox ended; capacity released",
        );
      if (TERMINAL_PHASES.has(s.phase)) this.gone.set(s.id, Date.now());
      return;
    }
    if (s.phase !== "Terminating" && !this.gone.has(s.id) && admission.adopt(s)) {
      logger.info({ sandbox: s.id, owner: s.owner, op: "adopt" }, "live sandbox adopted into the admission budget");
    }
  }

  /** The id ended here (kill, reap, delete event): late events must not reserve it again. */
  ended(id: string): void {
    const now = Date.now();
    this.gone.set(id, now);
    for (const [k, t] of this.gone) if (now - t > GONE_MEMORY_MS) this.gone.delete(k);
  }

  /** The id lives again on purpose (a create or a resume reserved it). */
  revived(id: string): void {
    this.gone.delete(id);
  }
}
