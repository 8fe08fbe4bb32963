// Periodic jobs the Manager runs while started (expiring snapshots, recovering interrupted
// pauses, automatic pause/wake): each on its own interval of the injected clock, a failure
// logged and retried at the next interval, all stopped together.
import type { Clock } from "./clock.ts";
import type { Logger } from "./log.ts";

export interface MaintenanceTask {
  name: string;
  everyMs: number;
  run(): Promise<unknown>;
}

export class Maintenance {
  private stopper?: AbortController;
  private loops: Promise<void>[] = [];

  constructor(private readonly o: { tasks: MaintenanceTask[]; clock: Clock; logger: Logger }) {}

  start(): void {
    const stop = new AbortController();
    this.stopper = stop;
    this.loops = this.o.tasks.map(async (task) => {
      while (!stop.signal.aborted) {
        try {
          await this.o.clock.sleep(task.everyMs, stop.signal);
        } catch {
          return; // stopped
        }
        await task
          .run()
          .catch((err) =>
            this.o.logger.error({ op: task.name, err }, "maintenance task failed; retrying next interval"),
          );
      }
    });
  }

  /** Stops the loops; resolves once every task that was running has finished. */
  async stop(): Promise<void> {
    this.stopper?.abort(new Error("manager closing"));
    await Promise.all(this.loops);
  }
}
