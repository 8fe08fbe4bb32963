// Streaming exec into a sandbox pod over the Kubernetes exec API (websocket): stdout and
// stderr flow as produced, stdin is pumped with backpressure, the exit code comes from the
// status channel. A local deadline backs up the in-sandbox `timeout` in case the pod never
// answers.
import { PassThrough, Readable } from "node:stream";
import type { SecureContextOptions } from "node:tls";
import { Exec, type KubeConfig } from "@kubernetes/client-node";
// Both are what client-node itself uses for exec; the handler is reached by path because the
// package does not re-export it, and it is the only way to choose the socket's options.
import { WebSocketHandler } from "@kubernetes/client-node/dist/web-socket-handler.js";
import WebSocket from "isomorphic-ws";
import type { Clock } from "../core/clock.ts";
import { UpstreamError } from "../core/errors.ts";
import type { ExecResult, ExecSession } from "../core/types.ts";
import { type TlsContextCache, tlsContextsOf } from "./client.ts";
import { classifyExit, exitCodeFromStatus } from "./execCommand.ts";

export interface PodExecTarget {
  namespace: string;
  pod: string;
  container: string;
}

export interface StartExecOptions {
  stdin?: Uint8Array | Readable;
  /** the in-sandbox timeout; the local deadline fires graceMs after it */
  timeoutMs?: number;
  graceMs?: number;
  clock: Clock;
}

const STDIN_CHANNEL = 0;
const CLOSE_CHANNEL = 255;
/** pause reading stdin while this much is handed to the socket and not yet written out */
const HIGH_WATER = 1 << 20;
/**
 * stdin goes out in messages of at most this much. Each message is copied twice on its way
 * (framed behind its channel byte, then joined with its websocket header for TLS), and the
 * copies of a megabyte (the channel helper, sent to every pod) are memory the allocator keeps
 * once freed: with this and the shared TLS context, what 200 channel opens left kept per
 * channel went 191 -> 138 KiB (docs/benchmarks.md, bench/k8s/channel-memory.ts).
 */
const STDIN_PIECE = 64 * 1024;
/** how long a killed session waits for the API server's answer to its close frame */
const KILL_CLOSE_GRACE_MS = 1_000;

interface SocketLike {
  /** cb runs once the frame is written to the connection (or failed: closed) */
  send(data: Buffer, cb?: (err?: Error) => void): void;
  close(): void;
  /** destroys the connection without the close handshake (ws) */
  terminate?(): void;
  /** stop / restart reading from the connection (ws) */
  pause?(): void;
  resume?(): void;
  readonly protocol: string;
  readonly readyState: number;
  on?(event: string, cb: (...args: unknown[]) => void): void;
  addEventListener?(event: string, cb: (...args: unknown[]) => void): void;
}

/**
 * The exec API with unmasked client frames (a zero masking key, which the protocol allows and
 * every server unmasks as usual). Masking exists so a hostile script in a browser cannot shape
 * the bytes an HTTP cache in the path sees; this client is no browser and its stream is TLS to
 * the API server. In ws it is a JavaScript loop over every byte sent: measured on the test
 * cluster it was 2.6 of the manager's 3.3 CPU seconds per 512 MiB of stdin (bench/k8s/transfer.ts),
 * the cost of every putArchive and so of every resume.
 */
export function createExecApi(kc: KubeConfig, o: { tls?: TlsContextCache } = {}): Exec {
  const unmasked = (mask: Buffer) => void mask.fill(0);
  const contexts = o.tls ?? tlsContextsOf(kc);
  return new Exec(
    kc,
    new WebSocketHandler(
      kc,
      (uri, protocols, opts) =>
        new WebSocket(uri, protocols, {
          ...opts,
          // one context for all (client.ts TlsContextCache): not a CA and key parse per connection
          secureContext: contexts.contextFor(opts as SecureContextOptions),
          // the API server accepts no extension; offering one only builds a deflate object per socket
          perMessageDeflate: false,
          generateMask: unmasked,
        }),
    ),
  );
}

/**
 * An output stream that reports when its reader falls behind. client-node writes every frame
 * it receives and ignores write()'s answer, so without this a slow reader (a pause uploading to
 * a slower registry) would have the whole output buffered in memory.
 */
class OutputStream extends PassThrough {
  onFull?: () => void;
  override write(chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    const ok = super.write(chunk, encoding as BufferEncoding, cb as (err?: Error | null) => void);
    if (!ok) this.onFull?.();
    return ok;
  }
}

// Over 60 lines on purpose: the websocket's stdin pump, output streams, status and deadline are wired to one another
// here.
export async function startExec(
  exec: Exec,
  target: PodExecTarget,
  argv: string[],
  opts: StartExecOptions,
): Promise<ExecSession> {
  const stdout = new OutputStream({ highWaterMark: HIGH_WATER });
  const stderr = new OutputStream({ highWaterMark: HIGH_WATER });
  // client-node only opens the stdin channel when given a stream; we hand it one that never
  // emits and pump the real input ourselves, with backpressure and a proper half-close.
  const stdinPlaceholder = opts.stdin ? new PassThrough() : null;
  const started = opts.clock.now().getTime();
  let status: { status?: string; reason?: string; message?: string } | undefined;
  let killed = false; // by the caller
  let deadlineFired = false;
  let settle!: (r: ExecResult) => void;
  let fail!: (e: Error) => void;
  const result = new Promise<ExecResult>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  result.catch(() => undefined); // callers may only read the streams; the rejection is still theirs to observe

  let ws: SocketLike;
  try {
    ws = (await exec.exec(
      target.namespace,
      target.pod,
      target.container,
      argv,
      stdout,
      stderr,
      stdinPlaceholder,
      false,
      (s) => {
        status = s;
      },
    )) as unknown as SocketLike;
  } catch (err) {
    throw execConnectError(err, target);
  }

  // Backpressure to the sandbox: stop reading the connection while a reader is behind; the
  // API server, the kubelet and finally the command's pipe fill up and the command waits.
  // A reader that destroys its stream is gone, not behind: that stream stops holding the socket.
  const behind = new Set<OutputStream>();
  const caughtUp = (out: OutputStream) => {
    if (behind.delete(out) && behind.size === 0) ws.resume?.();
  };
  for (const out of [stdout, stderr]) {
    out.onFull = () => {
      if (!ws.pause || behind.has(out) || out.destroyed) return;
      if (behind.size === 0) ws.pause();
      behind.add(out);
      out.once("drain", () => caughtUp(out));
    };
    out.once("close", () => caughtUp(out));
  }

  const deadline = new AbortController();
  if (opts.timeoutMs && opts.timeoutMs > 0) {
    opts.clock.sleep(opts.timeoutMs + (opts.graceMs ?? 5_000), deadline.signal).then(
      () => {
        deadlineFired = true;
        ws.resume?.();
        ws.close();
      },
      () => undefined,
    );
  }

  const onClose = () => {
    deadline.abort();
    const durationMs = opts.clock.now().getTime() - started;
    if (!stdout.writableEnded) stdout.end();
    if (!stderr.writableEnded) stderr.end();
    if (!status) {
      if (killed) return settle({ exitCode: 137, timedOut: false, oomKilled: false, durationMs });
      if (deadlineFired) return settle({ exitCode: 124, timedOut: true, oomKilled: false, durationMs });
      return fail(
        new UpstreamError(
          `exec in pod ${target.pod}: the stream closed before the exit status arrived; the pod may have been deleted or the API server restarted`,
        ),
      );
    }
    const code = exitCodeFromStatus(status);
    if (code instanceof Error) return fail(new UpstreamError(`exec in pod ${target.pod}: ${code.message}`));
    settle({ ...classifyExit(code, durationMs, opts.timeoutMs, killed), durationMs });
  };
  onSocketClose(ws, onClose);

  if (opts.stdin) pumpStdin(ws, opts.stdin);

  return {
    stdout,
    stderr,
    result,
    kill: () => {
      // Closing the stream ends this session only: a real kubelet leaves the command running.
      // The backend's exec (execKill.ts) also kills the command's processes.
      killed = true;
      ws.resume?.(); // the close handshake needs the socket read
      ws.close();
      // The API server may end the connection without answering the close frame (its exec
      // proxy closes when the command's stream ends); ws would then hold the socket for its
      // 30 s close timeout. A killed session needs no goodbye: drop the socket after a grace.
      opts.clock.sleep(KILL_CLOSE_GRACE_MS, deadline.signal).then(
        () => ws.terminate?.(),
        () => undefined,
      );
    },
  };
}

/** views of at most STDIN_PIECE bytes into `input`, not copies of it */
function* pieces(input: Uint8Array): Generator<Buffer> {
  const whole = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  for (let at = 0; at < whole.length; at += STDIN_PIECE) yield whole.subarray(at, at + STDIN_PIECE);
}

function pumpStdin(ws: SocketLike, input: Uint8Array | Readable): void {
  const src = input instanceof Uint8Array ? Readable.from(pieces(input)) : input;
  // Backpressure from the socket's own write callbacks, not by polling bufferedAmount on a
  // timer: a timer fires late on a busy machine and leaves the connection idle meanwhile.
  let queued = 0;
  const send = (chunk: Buffer) => {
    const framed = Buffer.allocUnsafe(chunk.length + 1);
    framed[0] = STDIN_CHANNEL;
    chunk.copy(framed, 1);
    queued += framed.length;
    ws.send(framed, () => {
      queued -= framed.length;
      // after a failed write the socket is closing; resuming lets the input drain into the void
      if (src.isPaused() && queued <= HIGH_WATER / 4) src.resume();
    });
  };
  src.on("data", (chunk: Buffer | string) => {
    if (ws.readyState !== 1) return;
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    for (let at = 0; at < bytes.length; at += STDIN_PIECE) send(bytes.subarray(at, at + STDIN_PIECE));
    if (queued > HIGH_WATER) src.pause();
  });
  src.on("end", () => {
    if (ws.readyState !== 1) return;
    if (ws.protocol === "v5.channel.k8s.io") ws.send(Buffer.from([CLOSE_CHANNEL, STDIN_CHANNEL]));
    // Older protocols cannot half-close stdin; the command sees EOF only when it exits.
  });
  src.on("error", () => ws.close());
  // a paused input must not wait forever for write callbacks of a connection that is gone
  onSocketClose(ws, () => src.resume());
}

function onSocketClose(ws: SocketLike, fn: () => void): void {
  if (ws.on) ws.on("close", fn);
  else ws.addEventListener?.("close", fn);
}

function execConnectError(err: unknown, target: PodExecTarget): UpstreamError {
  const e = err as { message?: string; error?: { message?: string }; target?: unknown };
  const msg = e?.message ?? e?.error?.message ?? String(err);
  return new UpstreamError(`exec in pod ${target.namespace}/${target.pod}: could not open the exec stream: ${msg}`);
}
