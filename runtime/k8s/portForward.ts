// A TCP connection to a port inside a sandbox's pod through the API server's port-forward
// (pods/portforward), spoken as the kubelet's websocket protocol v4.channel.k8s.io (binary):
// every binary frame starts with its channel (0 data, 1 error), and each channel's first two
// bytes are the port. The API server proxies this protocol to the kubelet as it is.
//
// What it cannot say: port-forward has no "connected" signal. The kubelet dials the port after
// the upgrade and reports a failure (a refused connect) on the error channel, so a refusal
// arrives as this stream's error (PodPortRefused, before any byte of the server's), never as a
// rejected open. confirmListening() is the real signal where one is needed (after a wake): an
// exec that reads the pod's listening sockets.
import type { IncomingMessage } from "node:http";
import { Duplex } from "node:stream";
import type { SecureContextOptions } from "node:tls";
import type { KubeConfig } from "@kubernetes/client-node";
import WebSocket from "isomorphic-ws";
import { UpstreamError } from "../core/errors.ts";
import { tlsContextsOf } from "./client.ts";

export const PORT_FORWARD_PROTOCOL = "v4.channel.k8s.io";
const DATA = 0;
const ERROR = 1;

/** Nothing accepted the connection in the pod (or the kubelet could not forward at all). */
export class PodPortRefused extends UpstreamError {
  constructor(sandboxId: string, port: number, detail: string, refused: boolean) {
    super(
      `sandbox ${sandboxId}: nothing accepted a connection on port ${port} inside the sandbox (${detail}); start a server listening on that port (on 127.0.0.1 or 0.0.0.0) first`,
      { id: sandboxId, port, refused },
    );
  }
}

export interface PodPortTarget {
  namespace: string;
  pod: string;
  /** the sandbox id, for messages */
  sandboxId: string;
  port: number;
}

/**
 * The relayed connection. Backpressure both ways: a reader that falls behind pauses the
 * websocket (the API server, the kubelet and the server inside then wait on full windows);
 * a write completes when ws has handed the frame to the socket. No half-close: port-forward
 * has none, so ending the writable side leaves the connection open until either side closes.
 */
export class PodPortStream extends Duplex {
  private prefix = [2, 2];
  private errorText = "";
  private received = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly target: PodPortTarget,
  ) {
    super({ allowHalfOpen: true });
    ws.on("message", (data: Buffer, isBinary: boolean) => this.onFrame(data, isBinary));
    ws.on("close", () => this.onClose());
    ws.on("error", (err: Error) => this.destroy(new UpstreamError(`${this.where()}: ${err.message}`)));
  }

  private where(): string {
    const t = this.target;
    return `port-forward to port ${t.port} of sandbox ${t.sandboxId} (pod ${t.namespace}/${t.pod})`;
  }

  private onFrame(data: Buffer, isBinary: boolean): void {
    if (!isBinary || data.length === 0) return;
    const channel = data[0];
    let payload = data.subarray(1);
    if (channel !== DATA && channel !== ERROR) return;
    const skip = Math.min(this.prefix[channel], payload.length);
    this.prefix[channel] -= skip;
    payload = payload.subarray(skip);
    if (payload.length === 0) return;
    if (channel === ERROR) {
      this.errorText += payload.toString();
      return;
    }
    this.received = true;
    if (!this.push(payload)) this.ws.pause();
  }

  private onClose(): void {
    if (this.destroyed) return;
    if (!this.errorText) {
      // no half-close: once the forward is gone nothing more can be written either, so the
      // stream is over as soon as its reader has the last byte
      this.once("end", () => this.destroy());
      this.push(null);
      return;
    }
    const t = this.target;
    const refused = /connection refused/i.test(this.errorText);
    // after the server's first byte it was a connection, broken: not a refusal to retry
    this.destroy(
      this.received
        ? new UpstreamError(`${this.where()}: ${this.errorText}`)
        : new PodPortRefused(t.sandboxId, t.port, this.errorText.trim(), refused),
    );
  }

  override _read(): void {
    if (this.ws.isPaused) this.ws.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.ws.readyState !== WebSocket.OPEN) {
      cb(new UpstreamError(`${this.where()}: the connection is closed`));
      return;
    }
    const framed = Buffer.allocUnsafe(chunk.length + 1);
    framed[0] = DATA;
    chunk.copy(framed, 1);
    this.ws.send(framed, (err?: Error) => cb(err ? new UpstreamError(`${this.where()}: ${err.message}`) : null));
  }

  override _final(cb: (err?: Error | null) => void): void {
    cb(); // no half-close in port-forward (see the class comment)
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
    else if (this.ws.readyState === WebSocket.OPEN) this.ws.close();
    this.ws.resume(); // the close handshake needs the socket read
    cb(err);
  }
}

/** Opens the port-forward; resolves once the websocket is upgraded (see the file comment). */
export async function openPodPort(kc: KubeConfig, target: PodPortTarget): Promise<PodPortStream> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new UpstreamError("port-forward: the kubeconfig names no current cluster");
  const base = cluster.server.replace(/^http/, "ws").replace(/\/$/, "");
  const path = `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}/portforward?ports=${target.port}`;
  const opts: Record<string, unknown> = {};
  await kc.applyToHTTPSOptions(opts);
  // unmasked client frames, as for exec (runtime/k8s/exec.ts says why and what masking costs)
  const ws = new WebSocket(`${base}${path}`, [PORT_FORWARD_PROTOCOL], {
    ...opts,
    // the kubeconfig's one TLS context, as for exec (client.ts TlsContextCache), and no deflate offer
    secureContext: tlsContextsOf(kc).contextFor(opts as SecureContextOptions),
    perMessageDeflate: false,
    generateMask: (mask: Buffer) => void mask.fill(0),
  });
  await new Promise<void>((resolve, reject) => {
    const fail = (err: Error) => {
      ws.off("open", opened);
      ws.terminate();
      reject(new UpstreamError(`port-forward to port ${target.port} of sandbox ${target.sandboxId}: ${err.message}`));
    };
    const opened = () => {
      ws.off("error", fail);
      ws.off("unexpected-response", refusedUpgrade);
      resolve();
    };
    // the API server's refusal (403 without pods/portforward, 404 for a gone pod) is an HTTP answer
    const refusedUpgrade = (_req: unknown, res: IncomingMessage) => {
      let body = "";
      res.on("data", (c: Buffer) => {
        if (body.length < 2048) body += c.toString();
      });
      res.on("error", () => undefined);
      res.on("end", () =>
        fail(new Error(`the API server answered ${res.statusCode} to the upgrade: ${statusMessage(body)}`)),
      );
    };
    ws.once("open", opened);
    ws.once("error", fail);
    ws.once("unexpected-response", refusedUpgrade);
  });
  return new PodPortStream(ws, target);
}

/** The message of a metav1.Status body (what the API server answers a refused upgrade with), else the text. */
function statusMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { message?: unknown };
    if (typeof parsed.message === "string") return parsed.message;
  } catch {
    // not a Status: the text itself says it
  }
  return body.trim();
}

/** argv that exits 0 when something listens on TCP `port` in the pod's network namespace. */
export function listeningProbeArgv(port: number): string[] {
  // /proc/net/tcp{,6}: local address as HEXIP:HEXPORT, state 0A is LISTEN; the sandbox's /proc
  // is its own, so this is the pod's namespace, not the node's
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return ["sh", "-c", `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ':${hex} [0-9A-F:]* 0A '`];
}
