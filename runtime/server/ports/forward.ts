// Forwarding one request over one relayed connection. Plain HTTP goes through Node's HTTP client
// on the relay (createConnection), so the server inside gets a clean HTTP/1.1 request and the
// response streams back with the pipes' own backpressure (an SSE stream flows chunk by chunk);
// an upgrade (websocket) writes the request head and then joins the two sockets byte for byte.
//
// What the server inside sees: the path without the path form's prefix (X-Forwarded-Prefix says
// what it was), the client's Host unchanged, X-Forwarded-For/-Host/-Proto, and never the
// credential that let the request in (our Authorization header, the sbx_token parameter).
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { SbxError } from "../../core/errors.ts";
import type { PortTarget } from "./target.ts";

/** Hop-by-hop headers (RFC 9110 7.6.1): they describe one connection, not the message. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

export interface ForwardInfo {
  target: PortTarget;
  /** drop Authorization: it carried our credential (owner or per-port token) */
  dropAuthorization: boolean;
}

/** The request's headers as the server inside gets them (raw pairs, original case and order). */
export function forwardedHeaders(req: IncomingMessage, info: ForwardInfo, upgrade: boolean): [string, string][] {
  const out: [string, string][] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (name.startsWith("x-forwarded-")) continue; // ours below replace what the client claimed
    if (name === "authorization" && info.dropAuthorization) continue;
    if (HOP_BY_HOP.has(name) && !(upgrade && (name === "connection" || name === "upgrade"))) continue;
    out.push([raw[i], raw[i + 1]]);
  }
  const sock = req.socket as Socket & { encrypted?: boolean };
  out.push(["X-Forwarded-For", sock.remoteAddress ?? ""]);
  if (req.headers.host) out.push(["X-Forwarded-Host", req.headers.host]);
  out.push(["X-Forwarded-Proto", sock.encrypted ? "https" : "http"]);
  if (info.target.prefix) out.push(["X-Forwarded-Prefix", info.target.prefix]);
  return out;
}

/**
 * Sends req to the server inside over `upstream` and streams the answer into res. Resolves when
 * the exchange is over (answered, or either side gone); never rejects: a failure before the
 * answer's head is a 502 with our error body, after it the response is cut.
 */
export function forwardHttp(
  req: IncomingMessage,
  res: ServerResponse,
  upstream: Duplex,
  info: ForwardInfo,
  onFailure: (status: number, message: string) => void,
): Promise<void> {
  return new Promise((resolve) => {
    let settled = false;
    const done = () => {
      if (settled) return;
      settled = true;
      upstream.destroy();
      resolve();
    };
    const out = http.request({
      method: req.method,
      path: info.target.path,
      // raw pairs keep the client's case and order; they are written at once, so nothing can
      // be added with setHeader afterwards
      headers: [...forwardedHeaders(req, info, false), ["Connection", "close"]].flat(),
      // no agent (agent: false would make one and ignore this): one relayed connection per
      // request, as the helper forks a relay per connection anyway
      createConnection: () => upstream as Socket,
    });
    // the relay arrives paused (port.ts): start it once the client's parser listens to it
    out.once("socket", (s) => s.resume());
    out.on("response", (answer) => {
      const headers: string[] = [];
      for (let i = 0; i < answer.rawHeaders.length; i += 2) {
        if (HOP_BY_HOP.has(answer.rawHeaders[i].toLowerCase())) continue;
        headers.push(answer.rawHeaders[i], answer.rawHeaders[i + 1]);
      }
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers);
      // SSE and other streams: no buffering between chunks
      res.flushHeaders();
      answer.on("error", () => res.destroy());
      answer.pipe(res);
      answer.on("end", done);
    });
    out.on("error", (err) => {
      // a relay's own refusal (Kubernetes port-forward reports a refused connect this way) says it all
      const message =
        err instanceof SbxError ? err.message : `the server inside the sandbox broke the connection: ${err.message}`;
      if (!res.headersSent) onFailure(502, message);
      else res.destroy();
      done();
    });
    req.on("error", () => {
      out.destroy();
      done();
    });
    // a client that went away ends the exchange (and with it the relay and the lease)
    res.on("close", () => {
      if (!res.writableFinished) out.destroy();
      done();
    });
    req.pipe(out);
  });
}

/**
 * Answers the client for a relay that failed before the server inside sent a byte (Kubernetes
 * port-forward reports a refused connect that way, after the relay opened); true when it did.
 */
export type EarlyFailure = (err: Error) => boolean;

/**
 * An upgrade (websocket): the request head goes to the server inside as received (path rewritten,
 * credential dropped), then the client's socket and the relay are joined both ways; the server's
 * 101 (or refusal) reaches the client unchanged. A relay that fails before the server's first
 * byte goes to `early`, so the client can get our error answer instead of a cut connection.
 * Resolves when both are closed.
 */
export function forwardUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  upstream: Duplex,
  info: ForwardInfo,
  early?: EarlyFailure,
): Promise<void> {
  const lines = [`${req.method} ${info.target.path} HTTP/1.1`];
  for (const [k, v] of forwardedHeaders(req, info, true)) lines.push(`${k}: ${v}`);
  upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
  return join(client, head, upstream, early);
}

/** The upgrade token of a raw TCP tunnel (sbx port-forward): the service answers the 101 itself. */
export const TUNNEL_UPGRADE = "sbx-tcp";

/**
 * A raw tunnel: nothing is sent to the server inside on the client's behalf; after our 101 the
 * client's socket and the relay are joined byte for byte (what kubectl port-forward gives).
 */
export function forwardTunnel(client: Duplex, head: Buffer, upstream: Duplex): Promise<void> {
  client.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${TUNNEL_UPGRADE}\r\nConnection: Upgrade\r\n\r\n`);
  return join(client, head, upstream);
}

function join(client: Duplex, head: Buffer, upstream: Duplex, early?: EarlyFailure): Promise<void> {
  return new Promise((resolve) => {
    if (head.length) upstream.write(head);
    let open = 2;
    let upstreamSpoke = false;
    let answered = false;
    const closed = () => {
      if (--open === 0) resolve();
    };
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.once("data", () => (upstreamSpoke = true));
    upstream.on("error", (err) => {
      // nothing of the server's reached the client yet: it can still get a proper answer, which
      // ends its socket itself (and with it this join)
      if (!upstreamSpoke && early?.(err)) {
        answered = true;
        upstream.unpipe(client);
        upstream.destroy();
        return;
      }
      end();
    });
    client.once("close", () => {
      upstream.destroy();
      closed();
    });
    upstream.once("close", () => {
      if (!answered) client.destroy();
      closed();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
}

/** An HTTP answer written straight to a socket, for refusals of an upgrade before it is relayed. */
export function rawAnswer(socket: Duplex, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n${extra.join("")}connection: close\r\n\r\n${text}`,
  );
}
