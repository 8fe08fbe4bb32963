// Command channels opened to warm pods before anyone claims them, so a warm sandbox's first
// command, and the credentials a claim writes before it returns, find a channel already open:
// opening one into a fresh pod is up to three execs (the helper copy included, open.ts), which
// was most of a credentialed claim's time. This replica primes only the ready pool pods it may
// claim (its partition of the pool), at most `max` of them; a claim moves the pod's channel to
// the sandbox's id (ChannelPool.move), and a pod that left this replica's part of the pool, or
// the pool, has its channel closed at the next sync. A primed channel is the helper's daemon in
// a pod no code of any tenant has run in yet, opened like any other; a claim that loses its race,
// or does not use the pod, closes the moved channel (claims/warmClaim.ts).
import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../../core/clock.ts";
import type { Logger } from "../../core/log.ts";
import type { ChannelPool } from "./pool.ts";

/** pool keys of primed channels: never a sandbox id, which has no colon */
const KEY_PREFIX = "warm:";
const keyOf = (podName: string) => `${KEY_PREFIX}${podName}`;

export interface WarmChannelsOptions {
  pool: ChannelPool;
  /** the ready, unclaimed pool pods this replica may claim now */
  claimable(): V1Pod[];
  clock: Clock;
  logger: Logger;
  /** how often the primed set is compared with the pool; default 1 s */
  intervalMs?: number;
  /** channels primed at once at most; default 64 */
  max?: number;
}

export class WarmChannels {
  private readonly stop = new AbortController();
  private running = false;
  /** pods whose channel a claim took: not primed again while the informer still shows them warm */
  private readonly moved = new Set<string>();
  readonly stats = { primed: 0, moved: 0, closed: 0 };

  constructor(private readonly o: WarmChannelsOptions) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    void this.loop();
  }

  /** Gives the primed channel of `podName`, if any, to sandbox `id`; true when there was one. */
  claim(podName: string, id: string): boolean {
    this.moved.add(podName);
    if (!this.o.pool.move(keyOf(podName), id, podName)) return false;
    this.stats.moved++;
    return true;
  }

  /** channels primed now (open or opening) */
  count(): number {
    return this.o.pool.keys().filter((k) => k.startsWith(KEY_PREFIX)).length;
  }

  /** One comparison: primes what is claimable and not primed, closes what is primed and no longer claimable. */
  sync(): void {
    const wanted = new Map<string, string>();
    const max = this.o.max ?? 64;
    const present = new Set<string>();
    for (const p of this.o.claimable()) {
      const name = p.metadata?.name;
      if (!name) continue;
      present.add(name);
      if (wanted.size < max && !this.moved.has(name)) wanted.set(keyOf(name), name);
    }
    for (const name of this.moved) if (!present.has(name)) this.moved.delete(name);
    const had = new Set(this.o.pool.keys());
    for (const key of had) {
      if (!key.startsWith(KEY_PREFIX) || wanted.has(key)) continue;
      this.o.pool.forget(key);
      this.stats.closed++;
    }
    for (const [key, name] of wanted) {
      if (this.o.pool.mode(key) === "exec") continue; // the helper cannot run there: nothing to prime
      if (!had.has(key)) this.stats.primed++;
      // the pool's open slots bound how many open at once; a broken one is opened again here
      void this.o.pool.prime(key, name);
    }
  }

  close(): void {
    this.stop.abort();
    for (const key of this.o.pool.keys()) if (key.startsWith(KEY_PREFIX)) this.o.pool.forget(key);
  }

  private async loop(): Promise<void> {
    const interval = this.o.intervalMs ?? 1000;
    while (!this.stop.signal.aborted) {
      try {
        this.sync();
      } catch (err) {
        this.o.logger.warn({ err: (err as Error).message, op: "warm-channels" }, "priming warm channels failed");
      }
      try {
        await this.o.clock.sleep(interval, this.stop.signal);
      } catch {
        return;
      }
    }
  }
}
