// The host side of the helper's socket protocol (see tools/local-helper/sbx-helper.c):
// frames of type (1 byte) + length (4 bytes big endian) + payload.
import net from "node:net";
import { PassThrough, type Readable } from "node:stream";

export interface HelperExecRequest {
  /** name of the per-command cgroup the helper creates: [a-z0-9-] */
  cgroup: string;
  cwd: string;
  argv: string[];
  env: Record<string, string>;
}

export type HelperStart = { kind: "started"; pid: number } | { kind: "failed"; stage: string; errno: number; message: string };
export type HelperExit = { kind: "exit"; code: number } | { kind: "signal"; signal: number } | { kind: "lost" };

export interface HelperExec {
  started: Promise<HelperStart>;
  stdout: PassThrough;
  stderr: PassThrough;
  exited: Promise<HelperExit>;
  /** drops the connection; the relay then kills the command's process group */
  destroy(): void;
}

const MAX_STDIN_FRAME = 64 * 1024;
/** output buffered for a slow reader before the command is throttled */
const OUTPUT_HIGH_WATER = 4 * 1024 * 1024;

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
  const fields = ["exec", req.cgroup, req.cwd, String(req.argv.length), ...req.argv, String(env.length), ...env];
  for (const f of fields) if (f.includes("\0")) throw new Error(`exec: argument, env or cwd contains a NUL byte: ${JSON.stringify(f)}`);
  return frame("R", fields.map((f) => f + "\0").join(""));
}

/** Incremental frame parser. */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  push(chunk: Buffer, onFrame: (type: string, payload: Buffer) => void): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    let off = 0;
    while (this.buf.length - off >= 5) {
      const len = this.buf.readUInt32BE(off + 1);
      if (this.buf.length - off - 5 < len) break;
      onFrame(String.fromCharCode(this.buf[off]), this.buf.subarray(off + 5, off + 5 + len));
      off += 5 + len;
    }
    this.buf = off === this.buf.length ? Buffer.alloc(0) : this.buf.subarray(off);
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

export function helperExec(socketPath: string, req: HelperExecRequest, stdin?: Uint8Array | Readable): HelperExec {
  let sock: net.Socket | undefined;
  let destroyed = false;
  const stdout = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  const stderr = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  let resolveStart!: (s: HelperStart) => void;
  let resolveExit!: (e: HelperExit) => void;
  const started = new Promise<HelperStart>((r) => (resolveStart = r));
  const exited = new Promise<HelperExit>((r) => (resolveExit = r));
  let done = false;
  const reader = new FrameReader();

  const head = [encodeRequest(req)];
  if (stdin === undefined || stdin instanceof Uint8Array) {
    const bytes = stdin ? Buffer.from(stdin) : Buffer.alloc(0);
    for (let off = 0; off < bytes.length; off += MAX_STDIN_FRAME) head.push(frame("I", bytes.subarray(off, off + MAX_STDIN_FRAME)));
    head.push(frame("E"));
  }
  const finish = (err?: Error) => {
    resolveStart({ kind: "failed", stage: "connect", errno: 0, message: err?.message ?? "the sandbox's helper closed the connection" });
    if (!done) resolveExit({ kind: "lost" });
    stdout.end();
    stderr.end();
  };
  const wire = (sock: net.Socket) => {
    const deliver = (out: PassThrough, payload: Buffer) => {
      // copy: payload is a view into the reader's buffer, which is reused
      if (!out.write(Buffer.from(payload))) {
        sock.pause();
        out.once("drain", () => sock.resume());
      }
    };
    sock.on("data", (chunk: Buffer) =>
      reader.push(chunk, (type, payload) => {
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
          case "1":
            deliver(stdout, payload);
            break;
          case "2":
            deliver(stderr, payload);
            break;
          case "X": {
            const [kind, n] = payload.toString().split(":");
            done = true;
            resolveExit(kind === "signal" ? { kind: "signal", signal: Number(n) } : { kind: "exit", code: Number(n) });
            // the relay waits for this close before it exits (see finish_connection in the helper)
            sock.destroy();
            break;
          }
        }
      }),
    );
    sock.on("error", finish);
    sock.on("close", () => finish());
    sock.write(Buffer.concat(head));
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
  };
}

function pumpStdin(stdin: Readable, sock: net.Socket): void {
  const onData = (chunk: Buffer | string) => {
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    for (let off = 0; off < bytes.length; off += MAX_STDIN_FRAME) {
      if (!sock.write(frame("I", bytes.subarray(off, off + MAX_STDIN_FRAME)))) {
        stdin.pause();
        sock.once("drain", () => stdin.resume());
      }
    }
  };
  const onEnd = () => sock.writable && sock.write(frame("E"));
  stdin.on("data", onData);
  stdin.on("end", onEnd);
  stdin.on("error", onEnd);
  // the command ended before its input did: discard the rest so the producer is not stuck
  sock.once("close", () => {
    stdin.off("data", onData);
    stdin.off("end", onEnd);
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
