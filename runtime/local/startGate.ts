// How many commands may be starting in one sandbox at once. Starting (connect to the helper's
// socket until it reports the command forked) is the only step that goes through the helper's
// single accept loop, whose listen backlog a burst of hundreds of execs overflows (EAGAIN at
// connect). So at most `starting` connects are in flight per sandbox, up to `waiting` more wait
// their turn in order, and past that an exec is told to come back (429 with Retry-After) instead
// of overflowing the backlog. Running commands are not counted: the sandbox's pids limit bounds
// those. No I/O.

export type ReleaseStart = () => void;

export class StartGate {
  private inFlight = 0;
  private readonly queue: (() => void)[] = [];

  constructor(
    readonly starting: number,
    readonly waiting: number,
  ) {}

  /**
   * A promise of a start slot (call the release once the command started or failed to), or
   * undefined when `starting` are in flight and `waiting` already wait: the caller refuses.
   */
  enter(): Promise<ReleaseStart> | undefined {
    if (this.inFlight < this.starting) {
      this.inFlight++;
      return Promise.resolve(this.releaser());
    }
    if (this.queue.length >= this.waiting) return undefined;
    return new Promise((resolve) => this.queue.push(() => resolve(this.releaser())));
  }

  /** in flight and waiting, for tests and logs */
  get load(): { starting: number; waiting: number } {
    return { starting: this.inFlight, waiting: this.queue.length };
  }

  private releaser(): ReleaseStart {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.queue.shift();
      // the slot passes straight to the next waiter: inFlight stays the same
      if (next) next();
      else this.inFlight--;
    };
  }
}
