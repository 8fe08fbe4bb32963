// The table of running commands an E2B client addresses by pid: list, stdin, signal, and
// re-attach (Connect) to their output. Two implementations behind one interface, chosen per
// command by how it was started (processTable.ts):
// - helperRegistry.ts: the sandbox's own registry (Kubernetes over the helper daemon), so
//   every replica, and a restarted one, finds the command; pids are the kernel's.
// - MemoryProcessRegistry here: the local platform and the per-exec websocket path. Per replica
//   and in memory: another replica does not see the command, a restart forgets the table (the
//   commands end with their exec sessions); pids are handles from 1000 up.
//
// Output: a process always drains its command's stdout/stderr (a command nobody reads never
// blocks on a full pipe) and hands every chunk to the feeds attached at that moment; with no
// feed the chunks are dropped; a feed that falls behind pauses the command's output
// (OutputFeed.full) until it catches up, so a slow reader slows the command instead of growing
// a queue.
import type { Writable } from "node:stream";
import type { ExecResult, ExecSession, TerminalSize } from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";
import { FeedSet, type OutputFeed, type ProcessEnd } from "./feed.ts";

export interface ProcessSpec {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  tag?: string;
  /** started on a pseudo-terminal of this size (StartRequest.pty): output is E2B's `pty` bytes */
  pty?: TerminalSize;
}

export type ProcessSelector = { pid: number } | { tag: string };

export interface TrackedProcess {
  readonly pid: number;
  readonly spec: ProcessSpec;
  /** a feed of the output from now on (helper: what the sandbox's ring still holds, when this replica does not read it yet), and the end */
  follow(): Promise<OutputFeed>;
  /** false when the process was started without stdin (StartRequest.stdin false) */
  readonly hasStdin: boolean;
  writeStdin(data: Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  /** ends the command and everything it started (SIGKILL semantics for every signal); resolves once it ended, or after a bound */
  kill(): Promise<void>;
  /** present on a process started with a pty: sets its window (Update with pty) */
  resize?(size: TerminalSize): Promise<void>;
}

/** a started process and the feed Start streams, attached before any output could be missed */
export interface StartedProcess {
  process: TrackedProcess;
  feed: OutputFeed;
}

export interface ProcessRegistry {
  add(caller: EnvdCaller, spec: ProcessSpec, session: ExecSession, stdin?: Writable): Promise<StartedProcess>;
  /** the running processes this layer started */
  list(caller: EnvdCaller): Promise<TrackedProcess[]>;
  find(caller: EnvdCaller, selector: ProcessSelector): Promise<TrackedProcess | undefined>;
}

/** The first match of the selector: by pid, or the first process with the tag. */
export function select<T extends { pid: number; spec: ProcessSpec }>(all: Iterable<T>, selector: ProcessSelector) {
  for (const p of all) if ("pid" in selector ? p.pid === selector.pid : p.spec.tag === selector.tag) return p;
  return undefined;
}

/** E2B's end event for an exec result; `killed`: a kill through this layer ended it. */
export function processEnd(r: ExecResult, killed: boolean): ProcessEnd {
  if (r.timedOut) return { exitCode: r.exitCode, exited: false, status: "timeout", timedOut: true, error: "timed out" };
  // envd (Go) reports a signalled process as exit code -1, not exited, "signal: killed"
  if (killed) return { exitCode: -1, exited: false, status: "signal: killed", timedOut: false };
  if (r.oomKilled)
    return { exitCode: r.exitCode, exited: false, status: "signal: killed", timedOut: false, error: "OOM killed" };
  return { exitCode: r.exitCode, exited: true, status: `exit status ${r.exitCode}`, timedOut: false };
}

export function errorEnd(err: unknown): ProcessEnd {
  return {
    exitCode: -1,
    exited: false,
    status: "error",
    timedOut: false,
    error: err instanceof Error ? err.message : String(err),
  };
}

/** Resolves once the stream ended, closed or failed. */
export const drained = (s: NodeJS.ReadableStream) =>
  new Promise<void>((resolve) => {
    s.once("end", resolve);
    s.once("close", resolve);
    s.once("error", () => resolve());
  });

/** Pids are handles this registry hands out, not kernel pids: they start here and only grow. */
const FIRST_PID = 1000;

class Tracked implements TrackedProcess {
  private readonly feeds: FeedSet;
  private killed = false;

  constructor(
    readonly pid: number,
    readonly spec: ProcessSpec,
    private readonly session: ExecSession,
    private readonly stdin: Writable | undefined,
    onEnd: () => void,
  ) {
    this.feeds = new FeedSet((paused) => {
      for (const s of [session.stdout, session.stderr]) paused ? s.pause() : s.resume();
    });
    // a broken stdin (command gone) must not become an unhandled error
    stdin?.on("error", () => undefined);
    session.stdout.on("data", (c: Buffer) => this.feeds.data("stdout", c));
    session.stderr.on("data", (c: Buffer) => this.feeds.data("stderr", c));
    const outputs = Promise.all([drained(session.stdout), drained(session.stderr)]);
    session.result
      .then(
        async (r) => {
          await outputs;
          return processEnd(r, this.killed);
        },
        (err: unknown) => errorEnd(err),
      )
      .then((end) => {
        onEnd();
        this.feeds.end(end);
        stdin?.destroy();
      });
  }

  get hasStdin(): boolean {
    return this.stdin !== undefined;
  }

  followNow(): OutputFeed {
    return this.feeds.add();
  }

  async follow(): Promise<OutputFeed> {
    return this.followNow();
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    this.stdin?.write(data);
  }

  async closeStdin(): Promise<void> {
    this.stdin?.end();
  }

  async kill(): Promise<void> {
    this.killed = true;
    this.session.kill();
  }

  get resize(): ((size: TerminalSize) => Promise<void>) | undefined {
    const session = this.session;
    if (!session.resize) return undefined;
    return async (size) => session.resize!(size);
  }
}

export class MemoryProcessRegistry implements ProcessRegistry {
  private nextPid = FIRST_PID;
  private readonly bySandbox = new Map<string, Map<number, Tracked>>();

  async add(caller: EnvdCaller, spec: ProcessSpec, session: ExecSession, stdin?: Writable): Promise<StartedProcess> {
    const sandboxId = caller.sandboxId;
    const pid = this.nextPid++;
    const table = this.bySandbox.get(sandboxId) ?? new Map<number, Tracked>();
    this.bySandbox.set(sandboxId, table);
    const forget = () => {
      table.delete(pid);
      if (table.size === 0 && this.bySandbox.get(sandboxId) === table) this.bySandbox.delete(sandboxId);
    };
    const p = new Tracked(pid, spec, session, stdin, forget);
    table.set(pid, p);
    return { process: p, feed: p.followNow() };
  }

  async list(caller: EnvdCaller): Promise<TrackedProcess[]> {
    return [...(this.bySandbox.get(caller.sandboxId)?.values() ?? [])];
  }

  async find(caller: EnvdCaller, selector: ProcessSelector): Promise<TrackedProcess | undefined> {
    return select(this.bySandbox.get(caller.sandboxId)?.values() ?? [], selector);
  }
}
