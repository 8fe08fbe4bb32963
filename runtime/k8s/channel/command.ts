// One command on a channel, as the ExecSession callers know: stdout and stderr stream as the
// daemon sends them, and the daemon sends only against credit this side grants as its
// readers consume, so a reader that stops stops its own command and no other.
import { Readable } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import { ConflictError, UpstreamError } from "../../core/errors.ts";
import type { ExecResult, ExecSession, TerminalSize } from "../../core/types.ts";
import { CREDIT_STEP, encodeFrame, type Frame, frameHeader, parseExit, REFUSALS, u32, WINDOW } from "./frames.ts";

/** what a command needs of its channel */
export interface CommandLink {
  send(frame: Buffer): void;
  /** forgets the stream (its exit came, or it failed) */
  release(stream: number): void;
}

const HIGH_WATER = 1 << 20;
const STDIN_CHUNK = 256 * 1024;

export interface ChannelSession extends ExecSession {
  /** the command's id in the pod's registry: what list shows and attach takes */
  readonly commandId: string;
  /** the command's pid in the pod, once it runs */
  readonly pid: Promise<number>;
  /** the daemon's exit text (frames.ts parseExit) once it came: tells killed:137 from exit:137 */
  readonly exit?: string;
}

export class ChannelCommand {
  readonly stdout: Readable;
  readonly stderr: Readable;
  readonly result: Promise<ExecResult>;
  readonly pid: Promise<number>;
  private settle!: (r: ExecResult) => void;
  private fail!: (e: Error) => void;
  private running!: (pid: number) => void;
  private refuse!: (e: Error) => void;
  private owed = 0; // output bytes consumed and not yet granted back
  private inCredit: number;
  private input?: Readable;
  private pending: Buffer[] = []; // stdin read and not yet sent: waits for credit
  private inputEnded = false;
  private endSent = false;
  private detachAtEnd = false;
  private endAtEnd = true;
  private exitText?: string;
  private done = false;
  /** the pod of a start on a pty (onTerminal); undefined: pipes, or an attach */
  private terminalPod?: string;
  private attached = false;
  private readonly started: number;

  constructor(
    private readonly link: CommandLink,
    readonly stream: number,
    readonly commandId: string,
    private readonly clock: Clock,
    /** stdin the daemon takes before its first credit: a window for a start, none for an attach */
    stdinCredit = WINDOW,
  ) {
    this.inCredit = stdinCredit;
    this.started = clock.now().getTime();
    // Readable calls read() before it takes the chunk being read off its buffer, and not again
    // until something is pushed: granted then, the check below would still count that chunk, and
    // a reader that paused with over HIGH_WATER buffered would never be granted more
    const onRead = () => queueMicrotask(() => this.grant());
    this.stdout = new Readable({ highWaterMark: HIGH_WATER, read: onRead });
    this.stderr = new Readable({ highWaterMark: HIGH_WATER, read: onRead });
    this.result = new Promise((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
    this.pid = new Promise((resolve, reject) => {
      this.running = resolve;
      this.refuse = reject;
    });
    // callers may only read the streams; the rejection is still theirs to observe (as exec.ts)
    this.result.catch(() => undefined);
    this.pid.catch(() => undefined);
  }

  /** a frame for this stream from the daemon */
  onFrame(f: Frame): void {
    const { type } = f;
    if (type === "1" || type === "2") {
      const out = type === "1" ? this.stdout : this.stderr;
      for (const part of f.parts) {
        this.owed += part.length;
        out.push(part);
      }
      this.grant();
      return;
    }
    const payload = f.payload;
    if (type === "R") this.running(Number(payload.toString()));
    else if (type === "C") {
      this.inCredit += payload.readUInt32BE(0);
      this.sendStdin();
    } else if (type === "X") this.exit(payload.toString());
    else if (type === "F") {
      const refusal = payload.toString();
      if (this.terminalPod !== undefined && refusal === REFUSALS.malformed) this.broken(this.noTerminals());
      else this.broken(new UpstreamError(`command ${this.commandId}: ${refusal}`, { refusal }));
    }
  }

  /** the channel went away or refused the command: the result rejects, the streams end */
  broken(err: Error): void {
    if (this.done) return;
    this.done = true;
    this.link.release(this.stream);
    this.refuse(err);
    this.fail(err);
    this.endStreams();
  }

  /** the command starts on a pty in `pod`: its session resizes and signals, and no input sends no end (a ^D) */
  onTerminal(pod: string): void {
    this.terminalPod = pod;
  }

  /**
   * a reader of a command that may be on a pty: its session resizes and signals too (the daemon
   * ignores a resize of a command on pipes, and a signal reaches such a command's group)
   */
  onAttach(): void {
    this.attached = true;
  }

  resize(size: TerminalSize): void {
    if (!this.done) this.link.send(encodeFrame("Z", this.stream, `${size.cols} ${size.rows}`));
  }

  // A daemon from before terminals counts a pty start's fields and refuses it, having run nothing
  // (frames.ts PTY_FIELD): it lives as long as the pod, which the replica that started it chose.
  private noTerminals(): ConflictError {
    return new ConflictError(
      `pod ${this.terminalPod} runs a command daemon from before terminals (started by an older sbx), so command ${this.commandId} did not run; pause and resume the sandbox to give it a current one, or run the command without a pty`,
      { pod: this.terminalPod, refusal: REFUSALS.malformed },
    );
  }

  /**
   * `thenDetach`: at the input's end detach (after ending the command's stdin only when
   * `endStdin`): a write from a replica that does not read the command, whose stdin stays open
   * for the next writer
   */
  pumpStdin(input: Uint8Array | Readable | undefined, thenDetach = false, endStdin = !thenDetach): void {
    this.detachAtEnd = thenDetach;
    this.endAtEnd = endStdin;
    if (!input) {
      if (this.terminalPod === undefined) this.link.send(encodeFrame("E", this.stream));
      return;
    }
    const src = input instanceof Uint8Array ? Readable.from([Buffer.from(input)]) : input;
    this.input = src;
    src.on("data", (chunk: Buffer | string) => {
      if (this.done) return;
      this.pending.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
      this.sendStdin();
    });
    src.on("end", () => {
      this.inputEnded = true;
      this.sendStdin();
    });
    // a failed input ends the command, as the websocket path's closed stream would
    src.on("error", () => this.signal(9));
  }

  // Sends stdin only against credit: the daemon holds at most a window per stream, and a
  // peer that sends past it loses its connection (one chunk of a stream can be a gigabyte).
  private sendStdin(): void {
    while (!this.done && this.inCredit > 0 && this.pending.length) {
      const head = this.pending[0];
      const n = Math.min(head.length, this.inCredit, STDIN_CHUNK);
      // header and payload apart: the payload is the caller's buffer, not a copy of it
      this.link.send(frameHeader("I", this.stream, n));
      this.link.send(head.subarray(0, n));
      this.inCredit -= n;
      if (n === head.length) this.pending.shift();
      else this.pending[0] = head.subarray(n);
    }
    if (this.done) return;
    if (this.pending.length) this.input?.pause();
    else if (this.inputEnded && !this.endSent) {
      this.endSent = true;
      if (this.endAtEnd) this.link.send(encodeFrame("E", this.stream));
      if (this.detachAtEnd) this.detach();
    } else this.input?.resume();
  }

  signal(sig: number): void {
    if (!this.done) this.link.send(encodeFrame("K", this.stream, String(sig)));
  }

  /** stop reading the command, which goes on (the stream can be re-attached) */
  detach(): void {
    if (this.done) return;
    this.link.send(encodeFrame("D", this.stream));
    this.broken(
      new UpstreamError(`command ${this.commandId} was detached; attach it again to read it`, { detached: true }),
    );
  }

  session(): ChannelSession {
    const self = this;
    const s: ChannelSession = {
      stdout: this.stdout,
      stderr: this.stderr,
      result: this.result,
      pid: this.pid,
      commandId: this.commandId,
      get exit() {
        return self.exitText;
      },
      kill: () => this.signal(9),
    };
    if (this.terminalPod !== undefined || this.attached) {
      s.resize = (size) => this.resize(size);
      s.signal = (sig) => this.signal(sig);
    }
    return s;
  }

  private grant(): void {
    // credit goes back once both readers have room: the sum of both buffers stays bounded. In
    // steps well under the window: granting in 1 MiB steps of a 4 MiB window cut a local
    // transfer from ~400 to ~50 MB/s; a 64th of the window keeps ~300 (frames.ts CREDIT_STEP)
    if (this.done || this.owed < CREDIT_STEP) return;
    if (this.stdout.readableLength >= HIGH_WATER || this.stderr.readableLength >= HIGH_WATER) return;
    this.link.send(encodeFrame("C", this.stream, u32(this.owed)));
    this.owed = 0;
  }

  private exit(text: string): void {
    if (this.done) return;
    this.done = true;
    this.link.release(this.stream);
    this.exitText = text;
    const durationMs = this.clock.now().getTime() - this.started;
    this.endStreams();
    try {
      this.settle({ ...resultOf(parseExit(text)), durationMs });
    } catch (err) {
      this.fail(err as Error);
    }
  }

  private endStreams(): void {
    this.input?.resume(); // a paused input must not wait for credit that will never come
    this.stdout.push(null);
    this.stderr.push(null);
  }
}

/**
 * The interface's exit semantics from the daemon's exit kind. A SIGKILL nobody asked for is
 * the kernel's OOM killer, as the websocket path concludes (execCommand.ts classifyExit).
 */
export function resultOf(e: ReturnType<typeof parseExit>): Omit<ExecResult, "durationMs"> {
  if (e.kind === "timeout") return { exitCode: 124, timedOut: true, oomKilled: false };
  if (e.kind === "killed") return { exitCode: e.code, timedOut: false, oomKilled: false };
  return { exitCode: e.code, timedOut: false, oomKilled: e.kind === "signal" && e.code === 137 };
}
