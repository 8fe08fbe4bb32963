// The control plane's table of running commands, so an E2B client can address them by pid:
// list, stdin, signal, and re-attach (Connect) to their output. Per replica and in memory: a
// command started through one replica is invisible to another, and a restart forgets the table
// (the commands themselves end with their exec sessions). Issue 12 moves this into the
// in-sandbox helper; the ProcessRegistry interface is what callers depend on, so that swap is
// local to this file.
//
// Output: each process always drains its command's stdout/stderr (a command nobody reads never
// blocks on a full pipe) and hands every chunk to the feeds attached at that moment. A re-attach
// sees output from then on, not what came before (as E2B's envd does). Memory is bounded: with
// no feed the chunks are dropped; a feed that falls behind pauses the command's output
// (OutputFeed.full) until it catches up, so a slow reader slows the command instead of growing a
// queue.
import type { Writable } from "node:stream";
import type { ExecResult, ExecSession } from "../../../core/types.ts";
import { OutputFeed, type ProcessEnd } from "./feed.ts";

export interface ProcessSpec {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  tag?: string;
}

export type ProcessSelector = { pid: number } | { tag: string };

export interface TrackedProcess {
  readonly pid: number;
  readonly spec: ProcessSpec;
  /** a feed of the output from now on, and the end */
  follow(): OutputFeed;
  /** false when the process was started without stdin (StartRequest.stdin false) */
  readonly hasStdin: boolean;
  writeStdin(data: Uint8Array): void;
  closeStdin(): void;
  /** ends the command and everything it started (SIGKILL semantics for every signal) */
  kill(): void;
}

export interface ProcessRegistry {
  /** track a started session; call follow() on the result in the same tick to see all output */
  add(sandboxId: string, spec: ProcessSpec, session: ExecSession, stdin?: Writable): TrackedProcess;
  list(sandboxId: string): TrackedProcess[];
  find(sandboxId: string, selector: ProcessSelector): TrackedProcess | undefined;
}

/** Pids are handles this registry hands out, not kernel pids: they start here and only grow. */
const FIRST_PID = 1000;

class Tracked implements TrackedProcess {
  private readonly feeds = new Set<OutputFeed>();
  private killed = false;
  private paused = false;

  constructor(
    readonly pid: number,
    readonly spec: ProcessSpec,
    private readonly session: ExecSession,
    private readonly stdin: Writable | undefined,
    onEnd: () => void,
  ) {
    // a broken stdin (command gone) must not become an unhandled error
    stdin?.on("error", () => undefined);
    const relay = (stream: "stdout" | "stderr") => (chunk: Buffer) =>
      this.broadcast({ kind: "data", stream, data: chunk });
    session.stdout.on("data", relay("stdout"));
    session.stderr.on("data", relay("stderr"));
    const drained = (s: NodeJS.ReadableStream) =>
      new Promise<void>((resolve) => {
        s.once("end", resolve);
        s.once("close", resolve);
        s.once("error", () => resolve());
      });
    const outputs = Promise.all([drained(session.stdout), drained(session.stderr)]);
    session.result
      .then(
        async (r) => {
          await outputs;
          return this.endOf(r);
        },
        (err: unknown) => ({
          exitCode: -1,
          exited: false,
          status: "error",
          timedOut: false,
          error: err instanceof Error ? err.message : String(err),
        }),
      )
      .then((end) => {
        onEnd();
        for (const f of this.feeds) f.push({ kind: "end", end });
        this.feeds.clear();
        stdin?.destroy();
      });
  }

  get hasStdin(): boolean {
    return this.stdin !== undefined;
  }

  follow(): OutputFeed {
    const feed = new OutputFeed(() => this.reconsider());
    this.feeds.add(feed);
    return feed;
  }

  writeStdin(data: Uint8Array): void {
    this.stdin?.write(data);
  }

  closeStdin(): void {
    this.stdin?.end();
  }

  kill(): void {
    this.killed = true;
    this.session.kill();
  }

  private broadcast(u: { kind: "data"; stream: "stdout" | "stderr"; data: Uint8Array }): void {
    for (const f of this.feeds) {
      if (f.closed) this.feeds.delete(f);
      else f.push(u);
    }
    this.reconsider();
  }

  /** pause the command's output while any feed is full; resume once none is */
  private reconsider(): void {
    for (const f of this.feeds) if (f.closed) this.feeds.delete(f);
    const full = [...this.feeds].some((f) => f.full);
    if (full === this.paused) return;
    this.paused = full;
    if (full) {
      this.session.stdout.pause();
      this.session.stderr.pause();
    } else {
      this.session.stdout.resume();
      this.session.stderr.resume();
    }
  }

  private endOf(r: ExecResult): ProcessEnd {
    if (r.timedOut)
      return { exitCode: r.exitCode, exited: false, status: "timeout", timedOut: true, error: "timed out" };
    // envd (Go) reports a signalled process as exit code -1, not exited, "signal: killed"
    if (this.killed) return { exitCode: -1, exited: false, status: "signal: killed", timedOut: false };
    if (r.oomKilled)
      return { exitCode: r.exitCode, exited: false, status: "signal: killed", timedOut: false, error: "OOM killed" };
    return { exitCode: r.exitCode, exited: true, status: `exit status ${r.exitCode}`, timedOut: false };
  }
}

export class MemoryProcessRegistry implements ProcessRegistry {
  private nextPid = FIRST_PID;
  private readonly bySandbox = new Map<string, Map<number, Tracked>>();

  add(sandboxId: string, spec: ProcessSpec, session: ExecSession, stdin?: Writable): TrackedProcess {
    const pid = this.nextPid++;
    const table = this.bySandbox.get(sandboxId) ?? new Map<number, Tracked>();
    this.bySandbox.set(sandboxId, table);
    const forget = () => {
      table.delete(pid);
      if (table.size === 0 && this.bySandbox.get(sandboxId) === table) this.bySandbox.delete(sandboxId);
    };
    const p = new Tracked(pid, spec, session, stdin, forget);
    table.set(pid, p);
    return p;
  }

  list(sandboxId: string): TrackedProcess[] {
    return [...(this.bySandbox.get(sandboxId)?.values() ?? [])];
  }

  find(sandboxId: string, selector: ProcessSelector): TrackedProcess | undefined {
    const table = this.bySandbox.get(sandboxId);
    if (!table) return undefined;
    if ("pid" in selector) return table.get(selector.pid);
    for (const p of table.values()) if (p.spec.tag === selector.tag) return p;
    return undefined;
  }
}
