// The manager role's reconcile loop: no Lease, and only for the sandboxes this process just
// created or resumed, until each is ready, finished, paused or gone. So a create, a warm claim
// and a resume get their pod (and credentials) with no controller running, which is what a
// manager rollout or a controller outage looks like. Everything else stays the leader's: the
// other sandboxes, the warm-pool refill, the orphan sweep, the periodic resync. When a leader
// runs too, both may reconcile the same key at once; that is safe because every step is
// idempotent (a second pod create is an AlreadyExists, status patches carry the same values),
// the same argument that makes a leader handover safe.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { TERMINAL_PHASES } from "../core/types.ts";
import type { ControlLoop } from "../k8s/control.ts";
import type { SandboxIndex } from "../k8s/sandboxIndex.ts";
import type { SandboxReconciler } from "./sandboxReconciler.ts";
import { type ReconcileResult, WorkQueue } from "./workqueue.ts";

export interface OwnSandboxesOptions {
  index: SandboxIndex;
  reconciler: SandboxReconciler;
  clock: Clock;
  logger: Logger;
  concurrency?: number;
}

export class OwnSandboxes implements ControlLoop {
  /** ids this process started and that are not settled yet */
  private readonly tracked = new Set<string>();
  private queue?: WorkQueue;
  private unsubscribe?: () => void;

  constructor(private readonly o: OwnSandboxesOptions) {}

  start(): void {
    if (this.queue) return;
    const queue = new WorkQueue((id) => this.reconcile(id), {
      clock: this.o.clock,
      logger: this.o.logger,
      concurrency: this.o.concurrency ?? 8,
    });
    this.queue = queue;
    // the pod's and the record's changes drive the next step, as they do for the leader
    this.unsubscribe = this.o.index.onKey((kind, key) => {
      if (kind === "sandbox" && this.tracked.has(key)) queue.add(key);
    });
    for (const id of this.tracked) queue.add(id);
  }

  /** never: this loop does not campaign for the Lease */
  isLeader(): boolean {
    return false;
  }

  enqueueSandbox(id: string): void {
    this.tracked.add(id);
    this.queue?.add(id);
  }

  /** how many sandboxes this process still drives (tests, metrics) */
  get pending(): number {
    return this.tracked.size;
  }

  /** for tests: resolves when the queue has nothing to do */
  async idle(): Promise<void> {
    await this.queue?.idle();
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    this.queue?.stop();
    this.queue = undefined;
  }

  private async reconcile(id: string): Promise<ReconcileResult> {
    if (!this.tracked.has(id)) return;
    const result = await this.o.reconciler.reconcile(id);
    if (this.settled(id)) {
      this.tracked.delete(id);
      return;
    }
    return result;
  }

  /** nothing more to do for a fresh sandbox: the leader's resync covers the rest of its life */
  private settled(id: string): boolean {
    const cr = this.o.index.resource(id);
    if (!cr) return true; // deleted (or a write that failed: it is Failed in the index then)
    if (cr.spec.desiredState === "Paused") return true;
    const sb = this.o.index.sandbox(id);
    return !sb || sb.ready || TERMINAL_PHASES.has(sb.phase);
  }
}
