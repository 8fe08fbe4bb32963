// Time as a dependency: production uses the system clock; tests inject a manual clock and
// drive timing logic (TTL, idle, probes, backoff) without sleeping.

export interface Clock {
  now(): Date;
  /** resolves after ms of this clock's time; rejects with the signal's reason when aborted */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => new Date(),
  sleep: (ms, signal) =>
    new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const t = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

/** A clock that only moves when a test calls advance(). */
export class ManualClock implements Clock {
  private t: number;
  private sleepers: { at: number; resolve: () => void }[] = [];
  constructor(start: Date | number = Date.UTC(2026, 0, 1)) {
    this.t = typeof start === "number" ? start : start.getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const entry = { at: this.t + ms, resolve };
      this.sleepers.push(entry);
      signal?.addEventListener(
        "abort",
        () => {
          this.sleepers = this.sleepers.filter((s) => s !== entry);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }
  /** moves time forward and wakes every sleeper that is due, in order */
  async advance(ms: number): Promise<void> {
    this.t += ms;
    const due = this.sleepers.filter((s) => s.at <= this.t).sort((a, b) => a.at - b.at);
    this.sleepers = this.sleepers.filter((s) => s.at > this.t);
    for (const s of due) s.resolve();
    await new Promise((r) => setImmediate(r));
  }
}
