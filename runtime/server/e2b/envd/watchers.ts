// WatchDir's bounds and the count of open watchers per owner (watchService.ts says what each
// bound does). Apart from the service so the shared context can hold them without a cycle.
import { Code, ConnectError } from "@connectrpc/connect";

export interface WatchLimits {
  /** how often the sandbox lists the directory */
  intervalMs: number;
  maxPerOwner: number;
  maxQueued: number;
  /** how long an event may wait for a stream's client that does not read before the watch is cut */
  stallMs: number;
  /** how long a polled watcher (CreateWatcher) lives without a GetWatcherEvents call */
  unpolledMs: number;
  maxListingBytes: number;
}

export const DEFAULT_WATCH_LIMITS: WatchLimits = {
  intervalMs: 500,
  maxPerOwner: 16,
  maxQueued: 10_000,
  stallMs: 30_000,
  unpolledMs: 120_000,
  maxListingBytes: 16 * 1024 * 1024,
};

/** Open watchers per owner, on this replica. */
export class WatcherSlots {
  private readonly byOwner = new Map<string, number>();

  constructor(private readonly max: number) {}

  acquire(owner: string): () => void {
    const n = this.byOwner.get(owner) ?? 0;
    if (n >= this.max)
      throw new ConnectError(
        `${n} directory watchers are open for this owner, the most this service allows: stop one (WatchHandle.stop()) first`,
        Code.ResourceExhausted,
      );
    this.byOwner.set(owner, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.byOwner.get(owner) ?? 1) - 1;
      if (left > 0) this.byOwner.set(owner, left);
      else this.byOwner.delete(owner);
    };
  }

  open(owner: string): number {
    return this.byOwner.get(owner) ?? 0;
  }
}
