// Registry storage given back as snapshots are deleted (issue 10 item 8). Deleting a snapshot
// deletes its manifest; its blobs stay until the registry's garbage collection runs. That
// collection keeps the blobs that tagged manifests reference and removes the rest, so a blob
// pushed for a manifest not yet put would be removed under the push: a collection never
// overlaps a push. PushGate is that rule; SnapshotGc runs collections after deletes and failed
// pushes, debounced, one at a time. The collection itself is the registry's and injected
// (runtime/local/registryGc.ts for docker-registry); ECR collects by itself (lifecycle policy,
// docs/pause-resume.md), so it needs none of this.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { OciClient, type OciClientOptions } from "./oci.ts";

/**
 * Pushes share the gate; a collection holds it alone. A collection waiting for in-flight
 * pushes already holds new ones back, so a steady stream of pauses cannot starve it; a pause
 * waits at most one collection (seconds on a local registry).
 */
export class PushGate {
  private pushes = 0;
  private collecting = false;
  private collectionsWaiting = 0;
  private waiters: Array<() => void> = [];

  async push<T>(fn: () => Promise<T>): Promise<T> {
    while (this.collecting || this.collectionsWaiting > 0) await this.changed();
    this.pushes++;
    try {
      return await fn();
    } finally {
      this.pushes--;
      this.wakeAll();
    }
  }

  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.collectionsWaiting++;
    try {
      while (this.collecting || this.pushes > 0) await this.changed();
    } finally {
      this.collectionsWaiting--;
    }
    this.collecting = true;
    try {
      return await fn();
    } finally {
      this.collecting = false;
      this.wakeAll();
    }
  }

  /** pushes in flight now (for logs and tests) */
  get inFlight(): number {
    return this.pushes;
  }

  private changed(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private wakeAll(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const resolve of w) resolve();
  }
}

export interface CollectionReport {
  /** storage before minus after, as the collector measured it */
  reclaimedBytes: number;
  /** short human summary, e.g. "12 blobs deleted" */
  detail?: string;
}

export interface SnapshotGcOptions {
  /** one garbage collection of the registry; runs with no push in flight */
  collect(): Promise<CollectionReport>;
  logger: Logger;
  clock: Clock;
  /** wait after a delete before collecting, so a burst of deletes costs one collection; default 5 s */
  delayMs?: number;
}

export class SnapshotGc {
  readonly gate = new PushGate();
  private timer?: { ac: AbortController; fired: Promise<void> };
  /** the collection queued behind the running one; later requests join it */
  private queued?: Promise<CollectionReport>;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly o: SnapshotGcOptions) {}

  /** Runs a push (blobs, then the manifest that references them) with no collection running. */
  whilePushing<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.gate.push(fn);
    // a failed push may have committed blobs that no manifest will ever reference
    p.catch(() => this.collectSoon());
    return p;
  }

  /** Manifests were deleted (or a push failed): collect after the delay. Never throws. */
  collectSoon(): void {
    if (this.closed || this.timer) return;
    const ac = new AbortController();
    const fired = this.o.clock.sleep(this.o.delayMs ?? 5000, ac.signal).then(
      () => {
        this.timer = undefined;
        this.collectNow().catch(() => undefined); // logged by run()
      },
      () => undefined, // cancelled by collectNow or close
    );
    this.timer = { ac, fired };
  }

  /** Collects once every push in flight has finished; after the running collection if one runs. */
  collectNow(): Promise<CollectionReport> {
    this.cancelTimer();
    if (this.queued) return this.queued;
    const run = this.chain.then(() => {
      this.queued = undefined;
      return this.run();
    });
    this.queued = run;
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Resolves once nothing is scheduled or running (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.timer || this.queued) {
      await this.timer?.fired;
      await this.chain;
    }
    await this.chain;
  }

  /** No new collections; waits for the running one. */
  async close(): Promise<void> {
    this.closed = true;
    this.cancelTimer();
    await this.chain;
  }

  private cancelTimer(): void {
    this.timer?.ac.abort();
    this.timer = undefined;
  }

  private async run(): Promise<CollectionReport> {
    const t0 = this.o.clock.now().getTime();
    try {
      const report = await this.gate.exclusive(() => this.o.collect());
      this.o.logger.info(
        { op: "snapshot-gc", ...report, durationMs: this.o.clock.now().getTime() - t0 },
        "snapshot registry garbage collected",
      );
      return report;
    } catch (err) {
      this.o.logger.error(
        { op: "snapshot-gc", err },
        "snapshot registry garbage collection failed; the next delete retries it",
      );
      throw err;
    }
  }
}

/** The registry client whose manifest deletes schedule a collection. */
export class CollectingOciClient extends OciClient {
  constructor(
    opts: OciClientOptions,
    private readonly gc: Pick<SnapshotGc, "collectSoon">,
  ) {
    super(opts);
  }

  override async deleteManifest(repo: string, digest: string): Promise<void> {
    await super.deleteManifest(repo, digest);
    this.gc.collectSoon();
  }
}
