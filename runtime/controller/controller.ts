// The controller: while this replica holds the Lease it runs the sandbox reconciler and the
// warm pool refill from one keyed work queue fed by the shared informers. Losing the lease
// (or being killed) at any point is safe: every step is level-triggered and idempotent, and
// the next leader converges from the records.
import type { CoordinationV1Api } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxIndex } from "../k8s/sandboxIndex.ts";
import { LeaderElector } from "./leader.ts";
import type { SandboxReconciler } from "./sandboxReconciler.ts";
import type { WarmPool } from "./warmpool.ts";
import { WorkQueue } from "./workqueue.ts";

const POOL_KEY = "pool";
const ORPHANS_KEY = "orphans";
const SANDBOX_PREFIX = "sandbox/";

export interface ControllerOptions {
  index: SandboxIndex;
  reconciler: SandboxReconciler;
  warmPool: WarmPool;
  coordination: CoordinationV1Api;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  clock: Clock;
  logger: Logger;
  concurrency?: number;
  resyncMs?: number;
  poolDebounceMs?: number;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
}

export class Controller {
  private queue?: WorkQueue;
  private readonly elector: LeaderElector;
  private unsubscribe?: () => void;

  constructor(private readonly o: ControllerOptions) {
    this.elector = new LeaderElector({
      api: o.coordination,
      namespace: o.leaseNamespace,
      name: o.leaseName,
      identity: o.identity,
      clock: o.clock,
      logger: o.logger,
      leaseDurationMs: o.leaseDurationMs,
      renewDeadlineMs: o.renewDeadlineMs,
      retryPeriodMs: o.retryPeriodMs,
      onStartedLeading: (signal) => this.lead(signal),
    });
  }

  start(): void {
    this.elector.start();
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  /** fast path after a create: reconcile now rather than when the watch event arrives */
  enqueueSandbox(id: string): void {
    this.queue?.add(SANDBOX_PREFIX + id);
  }

  enqueuePool(): void {
    this.queue?.add(POOL_KEY);
  }

  /** for tests: resolves when the queue has nothing to do */
  async idle(): Promise<void> {
    await this.queue?.idle();
  }

  async stop(): Promise<void> {
    await this.elector.stop();
    this.halt();
  }

  private lead(signal: AbortSignal): void {
    const queue = new WorkQueue((key) => this.reconcile(key), {
      clock: this.o.clock,
      logger: this.o.logger,
      concurrency: this.o.concurrency ?? 8,
    });
    this.queue = queue;
    this.unsubscribe = this.o.index.onKey((kind, key) => {
      // Refills wait a moment: a burst of claims then costs one refill round, and the
      // refill's pod creates do not compete with the claims' own writes.
      if (kind === "pool") queue.addAfter(POOL_KEY, this.o.poolDebounceMs ?? 250);
      else queue.add(SANDBOX_PREFIX + key);
    });
    this.resyncAll(queue);
    const resync = async () => {
      for (;;) {
        try {
          await this.o.clock.sleep(this.o.resyncMs ?? 30_000, signal);
        } catch {
          return;
        }
        this.resyncAll(queue);
      }
    };
    void resync();
    signal.addEventListener("abort", () => this.halt(), { once: true });
  }

  private resyncAll(queue: WorkQueue): void {
    for (const id of this.o.index.resourceIds()) queue.add(SANDBOX_PREFIX + id);
    queue.add(POOL_KEY);
    queue.add(ORPHANS_KEY);
  }

  private halt(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    this.queue?.stop();
    this.queue = undefined;
  }

  private async reconcile(key: string) {
    if (key === POOL_KEY) return this.o.warmPool.refill();
    if (key === ORPHANS_KEY) return this.o.reconciler.reconcileAllOrphans();
    return this.o.reconciler.reconcile(key.slice(SANDBOX_PREFIX.length));
  }
}
