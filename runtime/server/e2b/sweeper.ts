// Ends E2B sandboxes at their timeout end: kills them, or pauses them when they were created with
// autoPause (the SDK's lifecycle.onTimeout 'pause'). The Manager only knows the hard TTL, and
// lists per owner, so the sweeper visits the owners it has seen: every caller of the E2B routes
// and every owner in the store. After a restart without a store file (Kubernetes), a sandbox
// whose owner has not called since lives until the first such call, at most to its hard TTL.
import type { Clock } from "../../core/clock.ts";
import { ConflictError, NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Manager, Sandbox } from "../../core/types.ts";
import { endAtMs, e2bState, RESERVED } from "./shape.ts";
import type { E2bStore } from "./store.ts";

export interface SweeperDeps {
  manager: Manager;
  store: E2bStore;
  clock: Clock;
  logger: Logger;
  /** how often to look; 0 = never on its own (tests call sweep()) */
  intervalMs: number;
}

export class TimeoutSweeper {
  private readonly owners = new Set<string>();
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(private readonly d: SweeperDeps) {}

  /** An owner whose E2B sandboxes the sweeper should visit. */
  noteOwner(owner: string): void {
    this.owners.add(owner);
  }

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
    for (const [, r] of this.d.store.entries()) this.owners.add(r.owner);
    const now = this.d.clock.now().getTime();
    for (const owner of this.owners) {
      let all: Sandbox[];
      try {
        all = await this.d.manager.list({ owner });
      } catch (err) {
        this.d.logger.warn({ op: "e2b.timeout", owner, err }, "listing sandboxes for their E2B timeout failed");
        continue;
      }
      for (const s of all) {
        const rec = this.d.store.get(s.id);
        const e2b = s.metadata[RESERVED.end] !== undefined || rec?.endAt !== undefined;
        if (e2b && e2bState(s.phase) === "running" && endAtMs(s, rec) <= now) await this.end(s);
      }
    }
  }

  private async end(s: Sandbox): Promise<void> {
    const log = this.d.logger.child({ op: "e2b.timeout", sandbox: s.id, owner: s.owner });
    const { manager } = this.d;
    try {
      if (s.metadata[RESERVED.onTimeout] === "pause" && manager.pause) {
        try {
          await manager.pause(s.owner, s.id);
          log.info("E2B timeout reached: paused (autoPause)");
          return;
        } catch (err) {
          // a service without snapshots cannot honour autoPause; the timeout still ends it
          if (!(err instanceof ConflictError)) throw err;
          log.warn({ err }, "E2B timeout reached and pause is refused: killing instead");
        }
      }
      await manager.kill(s.owner, s.id);
      await this.d.store.forget(s.id);
      log.info("E2B timeout reached: killed");
    } catch (err) {
      if (err instanceof NotFoundError) return void (await this.d.store.forget(s.id).catch(() => undefined));
      log.warn({ err }, "ending a sandbox at its E2B timeout failed; the next pass retries");
    }
  }
}
