// Activity for the idle timeout, as the Manager records it: every API call on a sandbox touches
// it, but a write reaches the backend at most every `intervalMs` (Kubernetes stores it on the
// object) and at least 4 times per idle timeout, so throttling never lets the reaper reap early.
import type { Clock } from "./clock.ts";
import type { Logger } from "./log.ts";
import { type Backend, type Sandbox, TERMINAL_PHASES } from "./types.ts";

export class ActivityTouches {
  private readonly lastTouch = new Map<string, number>();
  /** per-sandbox idle timeouts from create, for backends whose Sandbox does not carry them */
  private readonly idleTimeouts = new Map<string, number>();

  constructor(
    private readonly o: { backend: Pick<Backend, "touch">; clock: Clock; logger: Logger; intervalMs?: number },
  ) {}

  /** Remembers a new sandbox's idle timeout (seconds). */
  created(id: string, idleTimeoutSeconds: number): void {
    this.idleTimeouts.set(id, idleTimeoutSeconds);
  }

  idleTimeoutOf(id: string): number | undefined {
    return this.idleTimeouts.get(id);
  }

  /** Records activity; never on the request's critical path (a failed write is logged). */
  touch(s: Sandbox): void {
    if (TERMINAL_PHASES.has(s.phase)) return;
    const now = this.o.clock.now();
    const last = this.lastTouch.get(s.id);
    const idle = s.idleTimeoutSeconds ?? this.idleTimeouts.get(s.id);
    const every = Math.min(this.o.intervalMs ?? 2000, idle ? (idle * 1000) / 4 : Infinity);
    if (last !== undefined && now.getTime() - last < every) return;
    this.lastTouch.set(s.id, now.getTime());
    this.o.backend.touch(s.id, now).catch((err) => {
      this.lastTouch.delete(s.id);
      this.o.logger.warn(
        { sandbox: s.id, owner: s.owner, op: "touch", err },
        "recording activity failed; the idle timeout may reap early",
      );
    });
  }

  forget(id: string): void {
    this.lastTouch.delete(id);
    this.idleTimeouts.delete(id);
  }
}
