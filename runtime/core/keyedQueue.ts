// One operation per key at a time, in call order; different keys run concurrently. The
// pause/resume service (runtime/snapshot/service.ts) runs every pause, resume, delete and
// recovery of a sandbox through one, with the Manager's admission steps inside the same turn.
export class KeyedQueue {
  private readonly tails = new Map<string, Promise<unknown>>();

  /** Runs fn after every earlier fn of this key settled (whether it failed or not). */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return run;
  }

  /** keys with an operation queued or running */
  get size(): number {
    return this.tails.size;
  }
}
