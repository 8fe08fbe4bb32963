// One long-lived, multiplexed command channel into one pod: the replica's side of the stream
// that `sbx-helper channel` relays to the pod's daemon (tools/local-helper/daemon.c). Many
// commands share it, each on a stream id of its own; list and attach reach commands that
// another channel (or another replica) started. When the transport ends, every call in flight
// fails with ChannelBrokenError (retryable) and the channel is done: the pool opens a new one.
import type { Readable } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import { UpstreamError } from "../../core/errors.ts";
import type { TerminalSize } from "../../core/types.ts";
import { ChannelCommand, type ChannelSession } from "./command.ts";
import { ChannelBrokenError } from "./errors.ts";
import {
  encodeFrame,
  type Frame,
  FrameDecoder,
  fields,
  LABEL_ENV,
  LABEL_MAX,
  type ListedCommand,
  OUTPUT_WINDOW,
  PTY_FIELD,
  parseList,
  u32,
  WINDOW,
} from "./frames.ts";

/** the exec stream the channel runs over: bytes to the pod, bytes from it */
export interface ChannelTransport {
  send(bytes: Buffer): void;
  readonly output: Readable;
  /** ends the stream; `output` then ends */
  close(): void;
}

export interface StartCommand {
  /** the command's id in the registry (8-64 of [A-Za-z0-9_-]) */
  id: string;
  argv: string[];
  /** added to the container's environment */
  env: Record<string, string>;
  cwd: string;
  timeoutMs?: number;
  stdin?: Uint8Array | Readable;
  /**
   * Opaque to the channel and the daemon, kept with the command and returned by list while it
   * runs (frames.ts LABEL_ENV); at most LABEL_MAX characters of base64url. Never logged.
   */
  label?: string;
  /** run it on a pseudo-terminal of this window (frames.ts PTY_FIELD): one output stream, stdout */
  pty?: TerminalSize;
}

export interface AttachOptions {
  /** output offsets to read from; default 0: what the ring still holds */
  stdout?: number;
  stderr?: number;
  stdin?: Uint8Array | Readable;
  /** at the end of `stdin` detach, ending the command's stdin only with `endStdin` (ChannelCommand.pumpStdin) */
  thenDetach?: boolean;
  endStdin?: boolean;
}

export interface Hello {
  channelPid: number;
  daemonPid: number;
}

export class CommandChannel {
  private readonly commands = new Map<number, ChannelCommand>();
  private readonly lists = new Map<number, { resolve: (l: ListedCommand[]) => void; reject: (e: Error) => void }>();
  private nextStream = 1;
  private closedWith?: Error;
  private readonly closeListeners: ((err: Error) => void)[] = [];
  readonly hello: Promise<Hello>;
  private greeted!: (h: Hello) => void;
  private notGreeted!: (e: Error) => void;

  constructor(
    private readonly transport: ChannelTransport,
    private readonly pod: string,
    private readonly clock: Clock,
  ) {
    this.hello = new Promise((resolve, reject) => {
      this.greeted = resolve;
      this.notGreeted = reject;
    });
    this.hello.catch(() => undefined);
    const decoder = new FrameDecoder();
    transport.output.on("data", (chunk: Buffer) => {
      if (this.closedWith) return;
      try {
        for (const f of decoder.push(chunk)) this.dispatch(f);
      } catch (err) {
        this.shutdown(`it sent a bad frame: ${(err as Error).message}`);
      }
    });
    transport.output.on("end", () => this.shutdown("the exec stream ended"));
    transport.output.on("close", () => this.shutdown("the exec stream closed"));
    transport.output.on("error", (err) => this.shutdown(`the exec stream failed: ${err.message}`));
  }

  get closed(): boolean {
    return !!this.closedWith;
  }

  /** commands whose result has not come yet */
  get inFlight(): number {
    return this.commands.size + this.lists.size;
  }

  onClose(fn: (err: Error) => void): void {
    if (this.closedWith) fn(this.closedWith);
    else this.closeListeners.push(fn);
  }

  start(cmd: StartCommand): ChannelSession {
    const env = Object.entries(cmd.env).map(([k, v]) => `${k}=${v}`);
    if (cmd.label !== undefined) env.push(labelEntry(cmd.label));
    const tty = cmd.pty ? [`${PTY_FIELD}${cmd.pty.cols} ${cmd.pty.rows}`] : [];
    const payload = fields([
      cmd.id,
      cmd.cwd,
      cmd.timeoutMs ?? 0,
      cmd.argv.length,
      ...cmd.argv,
      env.length,
      ...env,
      ...tty,
    ]);
    const c = this.open(cmd.id, encodeFrame("S", this.nextStream, payload));
    if (cmd.pty) c.onTerminal(this.pod);
    c.pumpStdin(cmd.stdin);
    return c.session();
  }

  /**
   * Reads a running (or recently finished) command from the given offsets (0 replays what the
   * ring kept). With `stdin`, writes it to the command's stdin and ends that when it ends; without,
   * the command's stdin stays open for a later reader. Stdin goes against the credit the daemon
   * sends after the attach (what an earlier reader queued counts against the window). The session
   * resizes and signals as a pty's does (the daemon ignores a resize of a command on pipes).
   */
  attach(id: string, o: AttachOptions = {}): ChannelSession {
    const payload = fields([id, o.stdout ?? 0, o.stderr ?? 0]);
    const c = this.open(id, encodeFrame("A", this.nextStream, payload), 0);
    c.onAttach();
    if (o.stdin) c.pumpStdin(o.stdin, o.thenDetach, o.endStdin ?? !o.thenDetach);
    return c.session();
  }

  /**
   * A TCP connection to `port` on the pod's own loopback, carried on a stream of this channel
   * (daemon.c 'P'; tunnel.ts makes it a Duplex): `pid` resolves (to 0) once it connected and
   * rejects with the daemon's "connect:errno:text" when it could not; output is what the server
   * sends, stdin what it reads, and the result comes when either side closed it.
   */
  tunnel(id: string, port: number, input: Readable): ChannelSession {
    const c = this.open(id, encodeFrame("P", this.nextStream, fields([id, port])));
    c.pumpStdin(input);
    return c.session();
  }

  list(): Promise<ListedCommand[]> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const stream = this.nextStream++;
    return new Promise((resolve, reject) => {
      this.lists.set(stream, { resolve, reject });
      this.transport.send(encodeFrame("L", stream));
    });
  }

  close(why = "it was closed"): void {
    this.shutdown(why);
  }

  private open(id: string, frame: Buffer, stdinCredit?: number): ChannelCommand {
    const stream = this.nextStream++;
    const c = new ChannelCommand(
      { send: (f) => !this.closedWith && this.transport.send(f), release: (s) => this.commands.delete(s) },
      stream,
      id,
      this.clock,
      stdinCredit,
    );
    if (this.closedWith) {
      c.broken(this.closedWith);
      return c;
    }
    this.commands.set(stream, c);
    this.transport.send(frame);
    // the output window past the daemon's opening one (frames.ts OUTPUT_WINDOW); a stream the
    // daemon refuses ignores it. Sent in the same tick, so it leaves in the open's message
    this.transport.send(encodeFrame("C", stream, u32(OUTPUT_WINDOW - WINDOW)));
    return c;
  }

  private dispatch(f: Frame): void {
    if (f.type === "H") {
      this.greeted(parseHello(f.payload.toString()));
      return;
    }
    if (f.type === "l") {
      this.lists.get(f.stream)?.resolve(parseList(f.payload));
      this.lists.delete(f.stream);
      return;
    }
    this.commands.get(f.stream)?.onFrame(f);
  }

  private shutdown(why: string): void {
    if (this.closedWith) return;
    const err = new ChannelBrokenError(this.pod, why);
    this.closedWith = err;
    this.notGreeted(err);
    for (const c of [...this.commands.values()]) c.broken(err);
    for (const l of this.lists.values()) l.reject(err);
    this.commands.clear();
    this.lists.clear();
    this.transport.close();
    for (const fn of this.closeListeners.splice(0)) fn(err);
  }
}

function labelEntry(label: string): string {
  if (label.length > LABEL_MAX || !/^[A-Za-z0-9_-]*$/.test(label))
    throw new UpstreamError(`a command label must be at most ${LABEL_MAX} characters of base64url`);
  return `${LABEL_ENV}${label}`;
}

function parseHello(text: string): Hello {
  const m = /^sbx-channel 1 channel=(\d+) daemon=(\d+)/.exec(text);
  if (!m) throw new UpstreamError(`the channel's hello ${JSON.stringify(text.slice(0, 80))} is not version 1`);
  return { channelPid: Number(m[1]), daemonPid: Number(m[2]) };
}
