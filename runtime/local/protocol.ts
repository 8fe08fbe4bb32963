// The host side of the helper's socket protocol (see tools/local-helper/sbx-helper.c):
// frames of type (1 byte) + length (4 bytes big endian) + payload.
import net from "node:net";
import { PassThrough, type Readable } from "node:stream";
import { MAX_STDIN_FRAME, StdinFrames } from "./stdinFrames.ts";

export interface HelperExecRequest {
  /** name of the per-command cgroup the helper creates: [a-z0-9-] */
  cgroup: string;
  cwd: string;
  argv: string[];
  env: Record<string, string>;
  /** a pseudo-terminal of this size instead of pipes (sbx-helper.c, "pty" requests) */
  pty?: { cols: number; rows: number };
}

export type HelperStart =
  | { kind: "started"; pid: number }
  | { kind: "failed"; stage: string; errno: number; message: string; code?: string };
export type HelperExit = { kind: "exit"; code: number } | { kind: "signal"; signal: number } | { kind: "lost" };

export interface HelperExec {
  started: Promise<HelperStart>;
  stdout: PassThrough;
  stderr: PassThrough;
  exited: Promise<HelperExit>;
  /** drops the connection; the relay then kills the command's process group */
  destroy(): void;
  /**
   * For a command being killed: reads the connection to its end whatever the readers of
   * stdout and stderr do. A relay blocked on a full connection holds the command's output pipe
   * locked (it splices from it), and a command writing to that pipe then waits uninterruptibly:
   * not even SIGKILL ends it. So a kill first unblocks the relay, which can then report the
   * exit and end. Output still goes to stdout and stderr up to RELEASED_BUFFER_BYTES unread per
   * stream; beyond that it is dropped (a reader that far behind was given up on). A relay that
   * has not ended graceMs later is cut off.
   */
  release(graceMs?: number): void;
  /** a pty's window size ('Z'), in order with stdin; ignored once the connection is gone */
  resize(cols: number, rows: number): void;
  /** a signal to a pty's foreground job ('K') */
  signal(sig: number): void;
}

/** how long a released connection may take to deliver its exit frame */
export const RELEASE_GRACE_MS = 10_000;
/** unread output kept per stream once released (see release) */
export const RELEASED_BUFFER_BYTES = 4 * 1024 * 1024;

const OUTPUT_FRAMES: ReadonlySet<string> = new Set(["1", "2"]);
/**
 * Output buffered for a slow reader before the command is throttled (the pipe and the socket
 * hold about 1.2 MiB more). Small on purpose: output waiting here long enough to outlive the
 * young generation is only freed by full garbage collections; with 4 MiB, a pause spent 2.9 s
 * of CPU per GiB collecting garbage while the registry was the slow reader, with 256 KiB 0.7 s.
 */
const OUTPUT_HIGH_WATER = 256 * 1024;

export function frame(type: string, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === "string" ? Buffer.from(payload) : payload;
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = type.charCodeAt(0);
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

export function encodeRequest(req: HelperExecRequest): Buffer {
  const env = Object.entries(req.env).map(([k, v]) => `${k}=${v}`);
  const mode = req.pty ? ["pty", String(req.pty.cols), String(req.pty.rows)] : ["exec"];
  const fields = [...mode, req.cgroup, req.cwd, String(req.argv.length), ...req.argv, String(env.length), ...env];
  for (const f of fields)
    if (f.includes("\0")) throw new Error(`exec: argument, env or cwd contains a NUL byte: ${JSON.stringify(f)}`);
  return frame("R", fields.map((f) => `${f}\0`).join(""));
}

export interface FrameHandlers {
  /** a whole frame of any type not streamed */
  frame(type: string, payload: Buffer): void;
  /** a piece of a streamed frame's payload, as it arrives */
  piece?(type: string, piece: Buffer): void;
}

/**
 * Incremental frame parser. Frames of the `streamed` types (the command's output) are handed
 * on in pieces as they arrive, as views of the received chunks: no copy and no reassembly, so
 * a megabyte output frame costs no more than its bytes. Other frames are collected whole.
 */
export class FrameReader {
  private readonly head = Buffer.alloc(5);
  private headLen = 0;
  private type = "";
  /** payload bytes of the current frame still to come */
  private left = 0;
  private parts: Buffer[] = [];
  constructor(private readonly streamed: ReadonlySet<string> = new Set()) {}

  push(chunk: Buffer, on: FrameHandlers): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.headLen < 5) {
        const n = Math.min(5 - this.headLen, chunk.length - at);
        chunk.copy(this.head, this.headLen, at, at + n);
        this.headLen += n;
        at += n;
        if (this.headLen < 5) break;
        this.type = String.fromCharCode(this.head[0]);
        this.left = this.head.readUInt32BE(1);
        if (this.left > 0) continue;
      } else {
        const n = Math.min(this.left, chunk.length - at);
        const part = chunk.subarray(at, at + n);
        this.left -= n;
        at += n;
        if (this.streamed.has(this.type) && on.piece) {
          on.piece(this.type, part);
          if (this.left > 0) continue;
          this.headLen = 0;
          continue;
        }
        this.parts.push(part);
        if (this.left > 0) continue;
      }
      const payload = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
      this.parts = [];
      this.headLen = 0;
      on.frame(this.type, payload);
    }
  }
}

/**
 * Connects to a helper's socket. A full accept queue (EAGAIN: a burst of connections to one
 * sandbox, or a helper starved of CPU) is retried briefly; anything else (ECONNREFUSED: the
 * helper is gone) fails at once.
 */
export function connectUnix(socketPath: string, attempts = 100): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const attempt = (left: number) => {
      const s = net.createConnection(socketPath);
      s.once("connect", () => {
        s.removeAllListeners("error");
        resolve(s);
      });
      s.once("error", (err: NodeJS.ErrnoException) => {
        if (err.code === "EAGAIN" && left > 1) setTimeout(() => attempt(left - 1), 5);
        else reject(err);
      });
    };
    attempt(attempts);
  });
}

// Over 60 lines on purpose: one socket's frame loop and its streams share their state in this closure.
export function helperExec(socketPath: string, req: HelperExecRequest, stdin?: Uint8Array | Readable): HelperExec {
  let sock: net.Socket | undefined;
  let destroyed = false;
  let released = false;
  const stdout = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  const stderr = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  let resolveStart!: (s: HelperStart) => void;
  let resolveExit!: (e: HelperExit) => void;
  const started = new Promise<HelperStart>((r) => (resolveStart = r));
  const exited = new Promise<HelperExit>((r) => (resolveExit = r));
  let done = false;
  const reader = new FrameReader(OUTPUT_FRAMES);

  const head = [encodeRequest(req)];
  if (stdin === undefined || stdin instanceof Uint8Array) {
    const bytes = stdin ? Buffer.from(stdin) : Buffer.alloc(0);
    for (let off = 0; off < bytes.length; off += MAX_STDIN_FRAME)
      head.push(frame("I", bytes.subarray(off, off + MAX_STDIN_FRAME)));
    // a terminal without input keeps it open: its end would be a ^D typed at the shell
    if (!(req.pty && stdin === undefined)) head.push(frame("E"));
  }
  // control frames sent before the connection is up go out right after the request
  const early: Buffer[] = [];
  const control = (f: Buffer) => {
    if (done || destroyed) return;
    if (sock) sock.writable && sock.write(f);
    else early.push(f);
  };
  const finish = (err?: Error) => {
    resolveStart({
      kind: "failed",
      stage: "connect",
      errno: 0,
      message: err?.message ?? "the sandbox's helper closed the connection",
      // the socket's error code (EAGAIN: the helper's accept queue stayed full), when a connect failed
      ...((err as NodeJS.ErrnoException | undefined)?.code ? { code: (err as NodeJS.ErrnoException).code } : {}),
    });
    if (!done) resolveExit({ kind: "lost" });
    stdout.end();
    stderr.end();
  };
  const wire = (sock: net.Socket) => {
    // one drain listener at most: a chunk can carry many output frames
    let waiting = false;
    const piece = (type: string, bytes: Buffer) => {
      const out = type === "1" ? stdout : stderr;
      if (released) {
        if (out.writableLength < RELEASED_BUFFER_BYTES) out.write(bytes);
        return;
      }
      // bytes is a view of the socket's chunk, which is never reused: no copy needed
      if (!out.write(bytes) && !waiting) {
        waiting = true;
        sock.pause();
        out.once("drain", () => {
          waiting = false;
          sock.resume();
        });
      }
    };
    const handlers: FrameHandlers = {
      piece,
      frame: (type, payload) => {
        switch (type) {
          case "P":
            resolveStart({ kind: "started", pid: Number(payload.toString()) });
            break;
          case "F": {
            const [stage, errno, ...rest] = payload.toString().split(":");
            resolveStart({ kind: "failed", stage, errno: Number(errno), message: rest.join(":") });
            sock.destroy();
            break;
          }
          case "X": {
            const [kind, n] = payload.toString().split(":");
            done = true;
            resolveExit(kind === "signal" ? { kind: "signal", signal: Number(n) } : { kind: "exit", code: Number(n) });
            // the relay waits for this close before it exits (see finish_connection in the helper)
            sock.destroy();
            break;
          }
        }
      },
    };
    sock.on("data", (chunk: Buffer) => reader.push(chunk, handlers));
    sock.on("error", finish);
    sock.on("close", () => finish());
    sock.write(Buffer.concat([...head, ...early]));
    if (stdin && !(stdin instanceof Uint8Array)) pumpStdin(stdin, sock);
  };
  connectUnix(socketPath).then(
    (s) => {
      if (destroyed) {
        s.destroy();
        return finish();
      }
      sock = s;
      wire(s);
    },
    (err: Error) => finish(err),
  );
  return {
    started,
    stdout,
    stderr,
    exited,
    destroy: () => {
      destroyed = true;
      sock?.destroy();
    },
    resize: (cols, rows) => control(frame("Z", `${cols} ${rows}`)),
    signal: (sig) => control(frame("K", String(sig))),
    release: (graceMs = RELEASE_GRACE_MS) => {
      if (released || done) return;
      released = true;
      if (!sock) return; // still connecting: wire() reads freely from the start
      sock.resume();
      const cut = setTimeout(() => sock?.destroy(), graceMs);
      cut.unref();
      sock.once("close", () => clearTimeout(cut));
    },
  };
}

function pumpStdin(stdin: Readable, sock: net.Socket): void {
  const sink = new StdinFrames(sock);
  // a socket that failed is reported by the connection's own error and close handlers
  sink.on("error", () => undefined);
  // input that failed ends the command's stdin (its consumer sees the end of its input)
  stdin.on("error", () => sink.end());
  stdin.pipe(sink);
  // the command ended before its input did: discard the rest so the producer is not stuck
  sock.once("close", () => {
    stdin.unpipe(sink);
    sink.destroy();
    stdin.resume();
  });
}

/**
 * Opens the watch connection: it stays open for as long as the sandbox's helper lives.
 * Resolves once connected (the sandbox is alive); onClose fires when it dies. No timer: a unix
 * connect completes in the kernel without the helper's help (or fails at once when nobody
 * listens), and a timer would fire first whenever the event loop was busy (a burst of creates
 * spawning bubblewrap), declaring live sandboxes dead.
 */
export async function helperWatch(socketPath: string, onClose: () => void): Promise<net.Socket> {
  const sock = await connectUnix(socketPath);
  sock.write(frame("W"));
  sock.on("error", () => sock.destroy());
  sock.on("close", onClose);
  return sock;
}
