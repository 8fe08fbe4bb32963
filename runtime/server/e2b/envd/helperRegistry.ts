// Processes in the sandbox's own command registry (Kubernetes: the pod's helper daemon,
// tools/local-helper/registry.c), so a pid works on every replica and after a restart: List
// asks the daemon and reads back the label Start stored with the command (label.ts); the pid is
// the command's kernel pid (unique among the sandbox's running commands, which is all List shows).
//
// The daemon gives a command one reader at a time, and an attach takes it from the reader
// before, who is told so. This replica holds at most one reader per command (HelperProcess) and
// fans its output out to its own feeds. A reader taken away while feeds still read here attaches
// again after a short delay at the offsets it had read to (the daemon's ring replays what it
// missed), so a stdin, close or kill from another replica (a short attach of its own) costs this
// reader a pause, not output. Two replicas that both stream one command take turns the same way.
import { PassThrough, Readable, type Writable } from "node:stream";
import type { SbxError } from "../../../core/errors.ts";
import type {
  AttachedCommand,
  CommandAttachOptions,
  Manager,
  RegisteredCommand,
  TerminalSize,
} from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";
import { FeedSet, type OutputFeed, type ProcessEnd } from "./feed.ts";
import { decodeProcessLabel } from "./label.ts";
import {
  drained,
  errorEnd,
  type ProcessRegistry,
  type ProcessSelector,
  type ProcessSpec,
  processEnd,
  type StartedProcess,
  select,
  type TrackedProcess,
} from "./registry.ts";

/** the daemon's refusals (runtime/k8s/channel/frames.ts REFUSALS), as UpstreamError details carry them */
const DISPLACED = "attached by another reader";
const UNKNOWN = "no such command";

export interface HelperRegistryOptions {
  /** first wait before attaching again after another reader took the command; doubles to 8x while it keeps happening */
  reattachMs?: number;
  /** how long a kill waits for the end, and a write from a replica that does not read the command for its credit */
  opTimeoutMs?: number;
}

type Attach = (commandId: string, stdin?: Readable, o?: CommandAttachOptions) => Promise<AttachedCommand | undefined>;

const detailsOf = (err: unknown) => ((err as SbxError)?.details ?? {}) as Record<string, unknown>;

/** settles with the promise, or after ms, whichever is first; a rejection counts as settled */
function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    p.then(
      () => resolve(),
      () => resolve(),
    ).finally(() => clearTimeout(t));
  });
}

/** an attach of its own for one write, close or kill: its output is not wanted */
function discardOutput(s: AttachedCommand): void {
  s.stdout.on("error", () => undefined).resume();
  s.stderr.on("error", () => undefined).resume();
}

export class HelperProcess implements TrackedProcess {
  pid: number;
  private readonly feeds: FeedSet;
  private session?: AttachedCommand;
  private stdin?: Writable;
  private attaching = false;
  private killed = false;
  private readonly read = { stdout: 0, stderr: 0 };
  private delay: number;
  private done?: ProcessEnd;
  private readonly ended: Promise<void>;
  private markEnded!: () => void;

  constructor(
    readonly commandId: string,
    readonly spec: ProcessSpec,
    readonly hasStdin: boolean,
    pid: number,
    private readonly attach: Attach,
    /** this process, or the one of this replica that already reads the command */
    private readonly claim: (p: HelperProcess) => HelperProcess,
    private readonly release: (p: HelperProcess) => void,
    private readonly o: Required<HelperRegistryOptions>,
  ) {
    this.pid = pid;
    this.delay = o.reattachMs;
    this.ended = new Promise((resolve) => (this.markEnded = resolve));
    this.feeds = new FeedSet((paused) => {
      const s = this.session;
      if (s) for (const out of [s.stdout, s.stderr]) paused ? out.pause() : out.resume();
    });
  }

  /** reads the command through `session` (Start's own, or an attach); `stdin` writes through it */
  hold(session: AttachedCommand, stdin?: Writable): void {
    this.session = session;
    this.stdin = stdin;
    this.attaching = false;
    stdin?.on("error", () => undefined);
    const relay = (stream: "stdout" | "stderr") => (chunk: Buffer) => {
      if (this.session !== session) return; // a reader taken away: the next attach replays this
      this.read[stream] += chunk.length;
      this.delay = this.o.reattachMs;
      this.feeds.data(stream, chunk);
    };
    session.stdout.on("data", relay("stdout"));
    session.stderr.on("data", relay("stderr"));
    this.feeds.reapply();
    const outputs = Promise.all([drained(session.stdout), drained(session.stderr)]);
    session.result.then(
      async (r) => {
        await outputs;
        if (this.session === session) this.finish(processEnd(r, this.killed || !!session.exit?.startsWith("killed:")));
      },
      (err: unknown) => {
        if (this.session === session) this.lost(err);
      },
    );
  }

  followNow(): OutputFeed {
    return this.feeds.add();
  }

  async follow(): Promise<OutputFeed> {
    const holder = this.claim(this);
    if (holder !== this) return holder.follow();
    const feed = this.feeds.add();
    if (this.done)
      this.feeds.end(this.done); // it ended while the caller looked it up
    else if (!this.session && !this.attaching) {
      // from what the ring still holds: connect(pid) also gets output from before it attached
      this.attaching = true;
      await this.reattach();
    }
    return feed;
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    if (this.session && this.stdin) {
      this.stdin.write(data);
      return;
    }
    // the daemon grants stdin credit right after the attach; without it (stdin closed) the
    // bytes go nowhere, as a write to a closed pipe would
    const s = await this.attach(this.commandId, Readable.from([Buffer.from(data)]), { thenDetach: true });
    if (!s) return;
    discardOutput(s);
    await bounded(s.result, this.o.opTimeoutMs);
  }

  async closeStdin(): Promise<void> {
    if (!this.hasStdin) return; // at its end since the start
    if (this.session && this.stdin) {
      this.stdin.end();
      return;
    }
    const s = await this.attach(this.commandId, Readable.from([]), { thenDetach: true, endStdin: true });
    if (!s) return;
    discardOutput(s);
    await bounded(s.result, this.o.opTimeoutMs);
  }

  /** a pty's window: through this replica's reader, else an attach of its own for the one frame (as writeStdin) */
  get resize(): ((size: TerminalSize) => Promise<void>) | undefined {
    if (this.spec.pty === undefined) return undefined;
    return async (size) => {
      if (this.session?.resize) return this.session.resize(size);
      const input = new PassThrough(); // ended after the resize: its end detaches, after the window went
      const s = await this.attach(this.commandId, input, { thenDetach: true });
      if (!s) return;
      discardOutput(s);
      s.resize?.(size);
      input.end();
      await bounded(s.result, this.o.opTimeoutMs);
    };
  }

  async kill(): Promise<void> {
    this.killed = true;
    if (this.session) {
      this.session.kill();
      await bounded(this.ended, this.o.opTimeoutMs);
      return;
    }
    // read until the exit, so that a kill that answers true has ended the command
    const s = await this.attach(this.commandId);
    if (!s) return;
    discardOutput(s);
    s.kill();
    await bounded(s.result, this.o.opTimeoutMs);
  }

  /** another reader took the command, or the channel broke: read on later if anyone reads here */
  private lost(err: unknown): void {
    this.session = undefined;
    this.stdin = undefined;
    const d = detailsOf(err);
    if (d.refusal === UNKNOWN) this.finish(errorEnd(`process ${this.pid} is gone from the sandbox`));
    else if (d.refusal !== DISPLACED && d.retryable !== true) this.finish(errorEnd(err));
    else if (this.feeds.size === 0) this.release(this);
    else this.later();
  }

  private later(): void {
    this.attaching = true;
    const wait = this.delay;
    this.delay = Math.min(this.delay * 2, this.o.reattachMs * 8);
    setTimeout(() => void this.reattach(), wait);
  }

  private async reattach(): Promise<void> {
    if (this.feeds.size === 0) {
      this.attaching = false;
      this.release(this);
      return;
    }
    const stdin = this.hasStdin ? new PassThrough() : undefined;
    try {
      const s = await this.attach(this.commandId, stdin, { stdout: this.read.stdout, stderr: this.read.stderr });
      if (!s) return this.finish(errorEnd(`process ${this.pid}: the sandbox no longer has a command registry`));
      this.hold(s, stdin);
    } catch (err) {
      this.finish(errorEnd(err));
    }
  }

  private finish(end: ProcessEnd): void {
    if (this.done) return;
    this.done = end;
    this.session = undefined;
    this.attaching = false;
    this.feeds.end(end);
    this.markEnded();
    this.release(this);
  }
}

const DEFAULTS: Required<HelperRegistryOptions> = { reattachMs: 250, opTimeoutMs: 10_000 };

/** Commands started over the helper: what Manager.exec returned carries the registry's id. */
export function isRegistered(session: object): session is AttachedCommand {
  return "commandId" in session && "pid" in session;
}

export class HelperProcessRegistry implements ProcessRegistry {
  /** the processes this replica reads (or is about to), by sandbox and command id */
  private readonly held = new Map<string, HelperProcess>();
  private readonly o: Required<HelperRegistryOptions>;

  constructor(
    private readonly manager: Manager,
    o: HelperRegistryOptions = {},
  ) {
    this.o = { ...DEFAULTS, ...o };
  }

  async add(
    caller: EnvdCaller,
    spec: ProcessSpec,
    session: AttachedCommand,
    stdin?: Writable,
  ): Promise<StartedProcess> {
    const p = this.make(caller, session.commandId, spec, stdin !== undefined, 0);
    const feed = p.followNow(); // before any output can come
    p.hold(session, stdin);
    this.held.set(this.key(caller, session.commandId), p);
    p.pid = await session.pid; // the daemon's 'R', at once after the start
    return { process: p, feed };
  }

  async list(caller: EnvdCaller): Promise<TrackedProcess[]> {
    const listed = await this.manager.listCommands?.(caller.owner, caller.sandboxId);
    const out: TrackedProcess[] = [];
    for (const c of listed ?? []) {
      const p = this.lookup(caller, c);
      if (p) out.push(p);
    }
    return out;
  }

  async find(caller: EnvdCaller, selector: ProcessSelector): Promise<TrackedProcess | undefined> {
    return select(await this.list(caller), selector);
  }

  private lookup(caller: EnvdCaller, c: RegisteredCommand): HelperProcess | undefined {
    if (c.state !== "running" || c.label === undefined) return undefined;
    const label = decodeProcessLabel(c.label);
    if (!label) return undefined; // not started through this layer (our own API's exec, file operations)
    // the one this replica reads it through, else one that registers itself when it starts to
    return this.held.get(this.key(caller, c.id)) ?? this.make(caller, c.id, label.spec, label.stdin, c.pid);
  }

  private make(caller: EnvdCaller, commandId: string, spec: ProcessSpec, stdin: boolean, pid: number): HelperProcess {
    const key = this.key(caller, commandId);
    const attach: Attach = async (id, input, o) =>
      this.manager.attachCommand?.(caller.owner, caller.sandboxId, id, input, o);
    // one reader per command on this replica: two would take the command from each other
    const claim = (p: HelperProcess) => {
      const holder = this.held.get(key);
      if (holder && holder !== p) return holder;
      this.held.set(key, p);
      return p;
    };
    const release = (p: HelperProcess) => {
      if (this.held.get(key) === p) this.held.delete(key);
    };
    return new HelperProcess(commandId, spec, stdin, pid, attach, claim, release, this.o);
  }

  private key(caller: EnvdCaller, commandId: string): string {
    return `${caller.sandboxId}\0${commandId}`;
  }
}
