// A sandbox port over the pod's command channel (docs/kubernetes-runtime.md, "Ports over the
// channel"): the daemon connects to the port on the pod's own loopback and the bytes ride the
// channel's stream with its credit, both ways, so a relayed request costs a frame each way on a
// connection that is already open, instead of a new TLS websocket through the API server and
// the kubelet (port-forward). The request's first bytes go out with the open, before the daemon
// says it connected (it queues them meanwhile), so a relayed request costs one round trip over
// the channel, not two; a refused connect then arrives as the stream's error before any byte of
// the server's, as with port-forward, and confirmListening() waits for the daemon's answer.
import { Duplex, type PassThrough } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import { PodPortRefused } from "../portForward.ts";
import type { ChannelSession } from "./command.ts";

/** how long a connect may take before the open gives up (a full listen backlog drops SYNs) */
export const TUNNEL_CONNECT_MS = 10_000;

/** the daemon's refusal text for a connect that failed: "connect:<errno>:<text>" */
export function connectFailure(message: string): { errno: number; text: string } | undefined {
  const m = /connect:(\d+):(.*)$/.exec(message);
  return m ? { errno: Number(m[1]), text: m[2] } : undefined;
}

const ECONNREFUSED = 111;

/**
 * The reason the connect timer is stopped with once the connect settled. abort() without one
 * builds a DOMException, stack trace and all, on every relayed request; nobody reads it.
 */
const SETTLED = Symbol("tunnel connect settled");

/** What openPort's callers may ask of a tunnel: see runtime/server/ports/connector.ts. */
export interface TunnelStream extends Duplex {
  /** resolves once the daemon connected; rejects as the stream fails (PodPortRefused when refused) */
  confirmListening(): Promise<void>;
}

/**
 * The connection as a Duplex. Backpressure: the server's bytes are pushed only while this
 * stream's reader keeps up (the channel stream's credit stops the daemon reading the socket
 * otherwise); writes complete as the channel stream takes them against its own credit. Ending
 * the writable side half-closes the connection (the server reads its end and still answers).
 */
class ChannelTunnel extends Duplex implements TunnelStream {
  constructor(
    private readonly session: ChannelSession,
    private readonly input: PassThrough,
    private readonly connected: Promise<void>,
  ) {
    super({ allowHalfOpen: true });
    session.stdout.on("data", (b: Buffer) => {
      if (!this.push(b)) session.stdout.pause();
    });
    // a refused connect ends the stream's output too: the refusal, not a clean end, must reach the reader
    session.stdout.on("end", () =>
      connected.then(
        () => this.push(null),
        () => undefined,
      ),
    );
    session.stderr.resume();
    connected.catch((err: Error) => this.destroy(err));
    session.result.then(
      () => {
        // the connection is over both ways: nothing more can be written once the reader is done
        if (this.readableEnded) this.destroy();
        else this.once("end", () => this.destroy());
      },
      // a failed connect fails the result too: the stream's error is the connect's, as mapped
      (err: Error) =>
        connected.then(
          () => this.destroy(err),
          () => undefined,
        ),
    );
  }

  confirmListening(): Promise<void> {
    return this.connected;
  }

  override _read(): void {
    this.session.stdout.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.input.write(chunk)) cb();
    else this.input.once("drain", () => cb());
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.input.end();
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.session.kill(); // closes the socket in the pod; a finished tunnel ignores it
    this.input.destroy();
    cb(err);
  }
}

/**
 * Wraps the tunnel at once (see the file comment): its connect's failure is the stream's error,
 * PodPortRefused as port-forward reports it (refused: true when nothing listens, which a waking
 * sandbox's caller retries; false for a connect that took over `connectMs`), or the channel's own.
 */
export function connectTunnel(
  session: ChannelSession,
  input: PassThrough,
  where: { sandboxId: string; port: number },
  clock: Clock,
  connectMs = TUNNEL_CONNECT_MS,
): TunnelStream {
  const gaveUp = new AbortController();
  const timer = clock.sleep(connectMs, gaveUp.signal).then(
    () => {
      session.kill();
      throw new PodPortRefused(where.sandboxId, where.port, `the connect took over ${connectMs} ms`, false);
    },
    () => undefined,
  );
  const connected = Promise.race([session.pid, timer])
    .then(
      () => undefined,
      (err: Error) => {
        const failure = connectFailure(err.message);
        if (!failure) throw err;
        throw new PodPortRefused(where.sandboxId, where.port, failure.text, failure.errno === ECONNREFUSED);
      },
    )
    .finally(() => gaveUp.abort(SETTLED));
  connected.catch(() => undefined); // the stream's error and confirmListening() report it
  return new ChannelTunnel(session, input, connected);
}
