// Leader election through a coordination.k8s.io Lease, so exactly one replica runs the
// reconcilers and refills the warm pool. Like client-go, expiry is judged by *our* clock
// from when we last saw the record change, never by comparing timestamps written by
// another machine's clock. Writes use the Lease's resourceVersion: two candidates racing
// for an expired lease cannot both win.
import type { CoordinationV1Api, V1Lease } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { apiMessage, isConflict, isNotFound } from "../k8s/client.ts";

/**
 * Lease times are MicroTime: the API server insists on six fractional digits, while
 * client-node serializes Dates with toISOString (three). A Date that prints six fixes it.
 */
export class MicroTime extends Date {
  override toISOString(): string {
    return super.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
  }
}

export interface LeaseView {
  holder: string;
  /** changes whenever the holder writes (renew or takeover) */
  version: string;
  leaseDurationMs: number;
}

export type LeaseDecision = "renew" | "acquire" | "wait";

/** Pure: what a candidate does next given the lease it sees and when it first saw it. */
export function decideLease(
  lease: LeaseView | undefined,
  observedAtMs: number,
  nowMs: number,
  identity: string,
): LeaseDecision {
  if (!lease?.holder) return "acquire";
  if (lease.holder === identity) return "renew";
  return nowMs - observedAtMs >= lease.leaseDurationMs ? "acquire" : "wait";
}

export interface LeaderElectorOptions {
  api: CoordinationV1Api;
  namespace: string;
  name: string;
  identity: string;
  clock: Clock;
  logger: Logger;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** called when this candidate becomes leader; the signal aborts when it stops leading */
  onStartedLeading(signal: AbortSignal): void;
  onStoppedLeading?(): void;
}

export class LeaderElector {
  private leading?: AbortController;
  private observed?: { version: string; at: number };
  private lastRenewAt = 0;
  private readonly stopper = new AbortController();
  private loop?: Promise<void>;
  private readonly leaseMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryMs: number;

  constructor(private readonly o: LeaderElectorOptions) {
    this.leaseMs = o.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = o.renewDeadlineMs ?? 10_000;
    this.retryMs = o.retryPeriodMs ?? 2_000;
  }

  isLeader(): boolean {
    return !!this.leading;
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** one election round; exposed so tests can step it with a manual clock */
  async tick(): Promise<void> {
    const now = this.o.clock.now().getTime();
    try {
      const won = await this.tryAcquireOrRenew(now);
      if (won) {
        this.lastRenewAt = now;
        if (!this.leading) this.becomeLeader();
      } else if (this.leading) {
        this.loseLeadership("another candidate holds the lease");
      }
    } catch (err) {
      this.o.logger.warn({ lease: this.o.name, identity: this.o.identity, err: apiMessage(err) }, "lease round failed");
      if (this.leading && now - this.lastRenewAt >= this.renewDeadlineMs)
        this.loseLeadership(`could not renew for ${this.renewDeadlineMs} ms`);
    }
  }

  /** stop campaigning; a leader releases the lease so a successor need not wait it out */
  async stop(): Promise<void> {
    this.stopper.abort(new Error("stopped"));
    await this.loop;
    if (this.leading) {
      this.loseLeadership("stopping");
      await this.release().catch((err) =>
        this.o.logger.warn(
          { lease: this.o.name, err: String(err) },
          "releasing the lease failed; successors wait for it to expire",
        ),
      );
    }
  }

  private async run(): Promise<void> {
    while (!this.stopper.signal.aborted) {
      await this.tick();
      try {
        await this.o.clock.sleep(this.retryMs, this.stopper.signal);
      } catch {
        return;
      }
    }
  }

  private async tryAcquireOrRenew(now: number): Promise<boolean> {
    const { api, namespace, name, identity } = this.o;
    let lease: V1Lease | undefined;
    try {
      lease = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const micro = new MicroTime(now);
    if (!lease) {
      try {
        await api.createNamespacedLease({
          namespace,
          body: {
            metadata: { name, namespace },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds: Math.ceil(this.leaseMs / 1000),
              acquireTime: micro,
              renewTime: micro,
              leaseTransitions: 0,
            },
          },
        });
        return true;
      } catch (err) {
        if (isConflict(err)) return false; // someone created it first
        throw err;
      }
    }
    const view: LeaseView = {
      holder: lease.spec?.holderIdentity ?? "",
      version: lease.metadata?.resourceVersion ?? "",
      leaseDurationMs: (lease.spec?.leaseDurationSeconds ?? Math.ceil(this.leaseMs / 1000)) * 1000,
    };
    if (!this.observed || this.observed.version !== view.version) this.observed = { version: view.version, at: now };
    const decision = decideLease(view, this.observed.at, now, identity);
    if (decision === "wait") return false;
    const spec = lease.spec ?? {};
    const takeover = decision === "acquire";
    const body: V1Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: Math.ceil(this.leaseMs / 1000),
        renewTime: micro,
        ...(takeover ? { acquireTime: micro, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 } : {}),
      },
    };
    try {
      await api.replaceNamespacedLease({ name, namespace, body });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  private async release(): Promise<void> {
    const { api, namespace, name, identity } = this.o;
    const lease = await api.readNamespacedLease({ name, namespace });
    if (lease.spec?.holderIdentity !== identity) return;
    await api.replaceNamespacedLease({
      name,
      namespace,
      body: { ...lease, spec: { ...lease.spec, holderIdentity: "", leaseDurationSeconds: 1 } },
    });
  }

  private becomeLeader(): void {
    this.leading = new AbortController();
    this.o.logger.info({ lease: this.o.name, identity: this.o.identity }, "became leader");
    this.o.onStartedLeading(this.leading.signal);
  }

  private loseLeadership(why: string): void {
    const l = this.leading;
    this.leading = undefined;
    this.o.logger.warn({ lease: this.o.name, identity: this.o.identity, why }, "stopped leading");
    l?.abort(new Error(`lost leadership: ${why}`));
    this.o.onStoppedLeading?.();
  }
}
