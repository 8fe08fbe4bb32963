// How many helper copies one replica sends at once. Each copy is the ~1 MB helper written into a
// websocket exec, and the client masks every frame it sends, so each copy in flight holds its own
// megabyte or more in the replica: 1,000 sandboxes opening their channels at once (a fleet's
// first commands after a replica starts) would hold a gigabyte. A few at a time keep that to a
// few megabytes; a copy takes tens of milliseconds, so the queue drains quickly.
export class UploadSlots {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly max: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) await new Promise<void>((r) => this.waiting.push(r));
    else this.active++;
    try {
      return await fn();
    } finally {
      // hand the slot straight to the next waiter, or give it back
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    }
  }
}
