// The machinery shared by both forms of a directory watch (watchService.ts): the in-sandbox
// polling command of watch.ts started through the Manager's exec, its output turned into events
// in a WatchState, and the stop that frees what a watcher costs (the command, the owner's place,
// the watchdog). See watchService.ts for the bounds.
import { Code, ConnectError } from "@connectrpc/connect";
import { NotFoundError, ValidationError } from "../../../core/errors.ts";
import type { ExecSession } from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";
import type { EnvdServices } from "./context.ts";
import { EXIT } from "./sandboxCommand.ts";
import { decideWatchEvents, type Listing, ListingReader, WATCH_SCRIPT, type WatchEvent } from "./watch.ts";
import type { WatchLimits } from "./watchers.ts";

/** What the watch command has produced so far, and a way to wait for more. */
export class WatchState {
  baseline?: Listing;
  readonly queue: WatchEvent[] = [];
  /** why it ended, once it has */
  end?: ConnectError | "exited";
  /** since when the client has not taken what is waiting for it (undefined: it is not behind) */
  stalledSince?: number;
  private wake?: () => void;

  notify(): void {
    this.wake?.();
  }

  /** resolves on news (an event, the baseline, the end), on abort, or after idleMs */
  wait(signal: AbortSignal, idleMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, idleMs);
      signal.addEventListener("abort", done);
      this.wake = done;
    });
  }
}

export function exitError(path: string, exitCode: number, started: boolean): ConnectError | "exited" {
  if (started) return "exited";
  if (exitCode === EXIT.missing) return new ConnectError(new NotFoundError("path", path).message, Code.NotFound);
  if (exitCode === EXIT.notDirectory)
    return new ConnectError(
      new ValidationError("path", path, "is not a directory: watch a directory").message,
      Code.InvalidArgument,
    );
  return new ConnectError(
    `the watch of ${JSON.stringify(path)} could not start (exit code ${exitCode})`,
    Code.Internal,
  );
}

/**
 * Feeds the command's output into `state`: the baseline first, then the events of each change.
 * `stop` ends the watch early (the command and the watcher's place); returns the stall check.
 */
function follow(
  session: ExecSession,
  state: WatchState,
  path: string,
  limits: WatchLimits,
  stallMs: number,
  stop: (why?: ConnectError) => void,
): () => void {
  const reader = new ListingReader(limits.maxListingBytes);
  const stalled = () =>
    stop(
      new ConnectError(
        `nothing took this watch's events for ${stallMs} ms (or more than ${limits.maxQueued} waited): the watch was cut; read the stream (or call GetWatcherEvents) more often, or watch a quieter directory`,
        Code.ResourceExhausted,
      ),
    );
  session.stderr.resume();
  session.stdout.on("data", (chunk: Buffer) => {
    if (state.end) return;
    try {
      for (const listing of reader.feed(chunk)) {
        if (state.baseline) state.queue.push(...decideWatchEvents(state.baseline, listing));
        state.baseline = listing;
      }
    } catch {
      stop(
        new ConnectError(
          `${path} has too many entries to watch (a listing over ${limits.maxListingBytes} bytes): watch a smaller directory`,
          Code.ResourceExhausted,
        ),
      );
    }
    if (!state.end && state.stalledSince !== undefined && state.queue.length > limits.maxQueued) stalled();
    state.notify();
  });
  // ended by itself (the sandbox stopped, the timeout) or by a stop: either way its place is freed
  session.result.then(
    (r) => {
      state.end ??= exitError(path, r.exitCode, state.baseline !== undefined);
      stop();
    },
    (err: unknown) => stop(new ConnectError(`the watch ended: ${(err as Error).message}`, Code.Unavailable)),
  );
  return () => {
    if (!state.end && state.stalledSince !== undefined && Date.now() - state.stalledSince > stallMs) stalled();
  };
}

export interface WatchStart {
  path: string;
  recursive: boolean;
  /** the command's end (the SDK's timeoutMs); undefined: none */
  timeoutMs?: number;
  /** the caller went away before the watch was in place */
  signal: AbortSignal;
  keepaliveMs: number;
  /** how long what waits may wait for the client before the watch is cut */
  stallMs: number;
  /** after the stop, whatever ended the watch */
  onStop?: () => void;
}

/** One watcher: started once its baseline listing is in; stop() frees all it holds, once. */
export class RunningWatch {
  readonly state = new WatchState();
  private session?: ExecSession;
  private watchdog?: NodeJS.Timeout;
  private stopped = false;

  private constructor(
    private readonly release: () => void,
    private readonly onStop?: () => void,
  ) {}

  /**
   * The watch, in place (its baseline listed); undefined when the caller went away first. A
   * missing path is not_found, a file invalid_argument; the owner's cap resource_exhausted.
   */
  static async start(s: EnvdServices, caller: EnvdCaller, w: WatchStart): Promise<RunningWatch | undefined> {
    const watch = new RunningWatch(s.watchers.acquire(caller.owner), w.onStop);
    const { state } = watch;
    try {
      watch.session = await s.manager.exec(caller.owner, caller.sandboxId, {
        command: [
          "/bin/sh",
          "-c",
          WATCH_SCRIPT,
          "sh",
          w.path,
          String(s.watch.intervalMs / 1000),
          w.recursive ? "" : "1",
        ],
        timeoutMs: w.timeoutMs,
      });
      const checkStall = follow(watch.session, state, w.path, s.watch, w.stallMs, (why) => watch.stop(why));
      watch.watchdog = setInterval(checkStall, Math.max(10, Math.min(w.stallMs / 4, 1000)));
      watch.watchdog.unref();
      while (!state.baseline && !state.end && !w.signal.aborted) await state.wait(w.signal, w.keepaliveMs);
    } catch (err) {
      watch.stop();
      throw err;
    }
    if (state.baseline && !w.signal.aborted) return watch;
    watch.stop();
    if (w.signal.aborted) return undefined;
    throw state.end === "exited" || state.end === undefined ? exitError(w.path, -1, false) : state.end;
  }

  stop(why?: ConnectError): void {
    if (why) this.state.end ??= why;
    this.state.notify();
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.watchdog);
    this.session?.kill();
    this.release();
    this.onStop?.();
  }
}
