// Ends E2B sandboxes at their timeout end: kills them, or pauses them when they were created with
// autoPause (the SDK's lifecycle.onTimeout 'pause'). The end is in each sandbox's reserved
// metadata (its durable record), and a pass finds every owner's E2B sandboxes from the records
// (Manager.listMarked), so a restarted process ends what came due while it was down, and every
// service replica runs a sweeper over the same records. Two replicas ending one sandbox at once
// is harmless: a kill of a gone sandbox is a 404 taken as done, and a pause racing a pause is a
// 409 after which the sandbox is left to the replica that is pausing it.
import type { Clock } from "../../core/clock.ts";
import { ConflictError, NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Sandbox } from "../../core/types.ts";
import type { E2bManager } from "./lifecycle.ts";
import { e2bState, endAtMs, RESERVED } from "./shape.ts";

export interface SweeperDeps {
  manager: E2bManager;
  clock: Clock;
  logger: Logger;
  /** how often to look; 0 = never on its own (tests call sweep()) */
  intervalMs: number;
}

export class TimeoutSweeper {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(private readonly d: SweeperDeps) {}

  start(): void {
    if (this.d.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.sweep(), this.d.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One pass; a pass already under way is joined, not doubled. Never rejects (errors are logged). */
  sweep(): Promise<void> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<void> {
    let all: Sandbox[];
    try {
      all = await this.d.manager.listMarked(RESERVED.end);
    } catch (err) {
      this.d.logger.warn({ op: "e2b.timeout", err }, "listing E2B sandboxes for their timeout failed");
      return;
    }
    for (const s of all) if (this.due(s)) await this.end(s);
  }

  private due(s: Sandbox): boolean {
    return e2bState(s.phase) === "running" && endAtMs(s) <= this.d.clock.now().getTime();
  }

  private async end(listed: Sandbox): Promise<void> {
    const log = this.d.logger.child({ op: "e2b.timeout", sandbox: listed.id, owner: listed.owner });
    const { manager } = this.d;
    try {
      // read again: another replica's setTimeout may have moved the end since the list
      const s = await manager.get(listed.owner, listed.id);
      if (!this.due(s)) return;
      if (s.metadata[RESERVED.onTimeout] === "pause" && manager.pause) {
        try {
          await manager.pause(s.owner, s.id);
          log.info("E2B timeout reached: paused (autoPause)");
          return;
        } catch (err) {
          if (!(err instanceof ConflictError)) throw err;
          if (await this.pausedElsewhere(s, err))
            return void log.info("E2B timeout reached: another replica pauses it");
          // a service without snapshots cannot honour autoPause; the timeout still ends it
          log.warn({ err }, "E2B timeout reached and pause is refused: killing instead");
        }
      }
      await manager.kill(s.owner, s.id);
      log.info("E2B timeout reached: killed");
    } catch (err) {
      if (err instanceof NotFoundError) return; // gone already: another replica, or a kill
      log.warn({ err }, "ending a sandbox at its E2B timeout failed; the next pass retries");
    }
  }

  /** The 409 of a pause racing another replica's pause (of this sandbox), not of a service that cannot pause. */
  private async pausedElsewhere(s: Sandbox, err: ConflictError): Promise<boolean> {
    const now = await this.d.manager.get(s.owner, s.id);
    if (e2bState(now.phase) === "paused") return true;
    return /another runtime replica|being paused by runtime replica/.test(err.message);
  }
}
