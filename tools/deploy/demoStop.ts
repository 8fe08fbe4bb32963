// How `npm run demo:k8s` stops: every part it starts registers a stop step as it comes up, and
// the steps run newest first (port-forward, `pulumi destroy`, the control plane, the temp
// dirs), each bounded so a hung step cannot keep the machine busy. A stop request during boot
// stops what exists so far. A second request skips the skippable steps (the destroy: the
// cluster goes with the control plane anyway); a third asks the caller to exit at once.

export interface StopStep {
  name: string;
  /** `signal` is aborted when the step timed out or was skipped: let go of what it holds */
  run: (signal: AbortSignal) => Promise<void>;
  /** give up after this long and go on with the next step (default: no bound) */
  timeoutMs?: number;
  /** a second stop request skips it */
  skippable?: boolean;
}

export interface StopOptions {
  log: (line: string) => void;
  now?: () => number;
  /** resolves after ms; injected so tests drive the bounds without sleeping */
  sleep?: (ms: number) => Promise<void>;
  /**
   * One Ctrl-C reaches every process of the terminal's group and npm relays it too: requests
   * closer together than this count as one.
   */
  debounceMs?: number;
}

export type StopAnswer = "stopping" | "skipping" | "force" | "repeat";

const defaultSleep = (ms: number) =>
  new Promise<void>((resolve) => {
    setTimeout(resolve, ms).unref();
  });

type Outcome = { kind: "done" } | { kind: "failed"; err: unknown } | { kind: "timeout" } | { kind: "skipped" };

export class StopSequence {
  private readonly steps: StopStep[] = [];
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly debounceMs: number;
  private readonly controller = new AbortController();
  private lastRequestAt = Number.NEGATIVE_INFINITY;
  private skipping = false;
  private skipCurrent: (() => void) | undefined;
  private running: Promise<string[]> | undefined;
  private finish: (failures: string[]) => void = () => undefined;
  /** one promise for every caller, made up front: done() may be called before the first request */
  private readonly finished = new Promise<string[]>((resolve) => {
    this.finish = resolve;
  });
  private inFlight: { name: string; promise: Promise<unknown>; timeoutMs: number } | undefined;

  constructor(private readonly opts: StopOptions) {
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? defaultSleep;
    this.debounceMs = opts.debounceMs ?? 1000;
  }

  /** Aborted at the first stop request: the boot checks it between phases. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Registers a step; it runs before every step registered earlier. */
  defer(step: StopStep): void {
    this.steps.unshift(step);
  }

  /**
   * A stop request. The first starts the sequence; the next skips the skippable steps; once
   * nothing is left to skip, the answer is "force" and the caller exits.
   */
  request(reason: string): StopAnswer {
    const at = this.now();
    const repeat = at - this.lastRequestAt < this.debounceMs;
    this.lastRequestAt = at;
    if (!this.running) {
      this.opts.log(`sbx demo: stopping (${reason}); Ctrl-C again skips \`pulumi destroy\``);
      this.controller.abort(new Error(`stop requested (${reason})`));
      this.running = this.runAll().then((failures) => {
        this.finish(failures);
        return failures;
      });
      return "stopping";
    }
    if (repeat) return "repeat";
    if (this.skipping || (!this.skipCurrent && !this.steps.some((s) => s.skippable))) return "force";
    this.skipping = true;
    this.skipCurrent?.();
    return "skipping";
  }

  /**
   * Marks a boot phase in flight (the control-plane boot, \`pulumi up\`): a stop waits for it,
   * up to timeoutMs (a second request skips the wait), before the first step, so it does not
   * destroy a stack the engine still holds locked nor stop a half-booted control plane.
   */
  track<T>(name: string, promise: Promise<T>, timeoutMs: number): Promise<T> {
    const entry = { name, promise, timeoutMs };
    this.inFlight = entry;
    const clear = () => {
      if (this.inFlight === entry) this.inFlight = undefined;
    };
    promise.then(clear, clear);
    return promise;
  }

  /** Resolves when every step has run, with the failures (one line each); empty if all went well. */
  done(): Promise<string[]> {
    return this.finished;
  }

  /** Starts the sequence without a request (the demo's own failure during boot). */
  stopNow(reason: string): Promise<string[]> {
    this.request(reason);
    return this.done();
  }

  private async runAll(): Promise<string[]> {
    const failures: string[] = [];
    const phase = this.inFlight;
    if (phase) {
      // the phase's own failure is the boot's to report, not a stop failure
      const settled = () =>
        phase.promise.then(
          () => undefined,
          () => undefined,
        );
      const outcome = await this.runStep({
        name: `waiting for ${phase.name} to finish`,
        run: settled,
        timeoutMs: phase.timeoutMs,
        skippable: true,
      });
      if (outcome.kind !== "done")
        this.opts.log(`sbx demo: went on without waiting for ${phase.name} (${outcome.kind})`);
    }
    while (this.steps.length > 0) {
      const step = this.steps.shift() as StopStep;
      if (step.skippable && this.skipping) {
        this.opts.log(`sbx demo: skipped ${step.name}`);
        continue;
      }
      const outcome = await this.runStep(step);
      if (outcome.kind === "failed") {
        const msg = outcome.err instanceof Error ? outcome.err.message : String(outcome.err);
        failures.push(`${step.name}: ${msg}`);
        this.opts.log(`sbx demo: ${step.name} failed: ${msg}`);
      } else if (outcome.kind === "timeout") {
        failures.push(`${step.name}: gave up after ${Math.round((step.timeoutMs ?? 0) / 1000)} s`);
        this.opts.log(`sbx demo: ${step.name}: gave up after ${Math.round((step.timeoutMs ?? 0) / 1000)} s`);
      } else if (outcome.kind === "skipped") this.opts.log(`sbx demo: skipped ${step.name}`);
    }
    return failures;
  }

  private async runStep(step: StopStep): Promise<Outcome> {
    this.opts.log(`sbx demo: ${step.name}`);
    const abort = new AbortController();
    const racers: Promise<Outcome>[] = [
      Promise.resolve()
        .then(() => step.run(abort.signal))
        .then(
          (): Outcome => ({ kind: "done" }),
          (err): Outcome => ({ kind: "failed", err }),
        ),
    ];
    if (step.timeoutMs !== undefined)
      racers.push(this.sleep(step.timeoutMs).then((): Outcome => ({ kind: "timeout" })));
    if (step.skippable)
      racers.push(new Promise<Outcome>((resolve) => (this.skipCurrent = () => resolve({ kind: "skipped" }))));
    const outcome = await Promise.race(racers);
    this.skipCurrent = undefined;
    if (outcome.kind !== "done" && outcome.kind !== "failed") abort.abort(new Error(`${step.name}: ${outcome.kind}`));
    return outcome;
  }
}

export interface StopSource {
  on(event: "SIGINT" | "SIGTERM", fn: () => void): unknown;
  readonly ppid: number;
}

/**
 * Stop requests: SIGINT, SIGTERM and, when npm runs us, the death of that npm (we are
 * re-parented; npm cannot relay anything once SIGKILLed). A 1 s poll of the parent is the cost.
 */
export function listenForStop(
  onRequest: (reason: string) => void,
  o: { source?: StopSource; underNpm?: boolean; pollMs?: number } = {},
): () => void {
  const source = o.source ?? process;
  source.on("SIGINT", () => onRequest("SIGINT"));
  source.on("SIGTERM", () => onRequest("SIGTERM"));
  if (!(o.underNpm ?? Boolean(process.env.npm_lifecycle_event))) return () => undefined;
  const parent = source.ppid;
  if (parent <= 1) return () => undefined;
  const timer = setInterval(() => {
    if (source.ppid === parent) return;
    clearInterval(timer);
    onRequest("the npm that ran the demo exited");
  }, o.pollMs ?? 1000);
  timer.unref();
  return () => clearInterval(timer);
}
