// The terminal websocket, GET /v1/sandboxes/{id}/terminal (docs/terminals.md): a command on a pty
// in the sandbox (ExecRequest.pty), its bytes in binary frames both ways, resize and signal in
// JSON text frames, its exit in a last text frame before a normal close. Everything that can be
// refused (token, query, ownership, a paused sandbox's wake over budget) is decided before the
// upgrade, so a refusal is a plain HTTP answer with our JSON error body. Upgrades arrive on the
// server's 'upgrade' event beside the port relay's (ports/service.ts): this listener takes the
// terminal path, leaves what the relay claims to it, and answers 404 for every other path.
import type { IncomingMessage } from "node:http";
import { type Duplex, PassThrough } from "node:stream";
import { finished } from "node:stream/promises";
import type { FastifyInstance } from "fastify";
import WebSocket from "isomorphic-ws";
import { type Authenticator, identify } from "../auth/identities.ts";
import type { Clock } from "../core/clock.ts";
import { CapacityError, HTTP_STATUS, SbxError, ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import {
  parseClientControl,
  parseTerminalProtocols,
  parseTerminalQuery,
  type ServerControl,
  selectTerminalProtocol,
  TERMINAL_PATH,
} from "../core/terminal.ts";
import type { ExecSession, Manager } from "../core/types.ts";
import { rawAnswer } from "./ports/forward.ts";
import { errorBody } from "./requestErrors.ts";
import type { RouteDef } from "./routes.ts";

/**
 * The few parts of the `ws` package used here (it ships no types, and @types/ws is not a dependency).
 * Imported through isomorphic-ws (typed, and a literal import): esbuild then carries `ws` into the
 * deployed runtime.mjs, which runs with no node_modules beside it; a createRequire("ws") it cannot
 * see made the bundled manager exit at start (test/k8s/runtime/roles-bundle.test.ts).
 */
interface WsSocket {
  readonly readyState: number;
  send(data: Buffer | string, opts: { binary: boolean }, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  pause(): void;
  resume(): void;
  on(event: "message", fn: (data: Buffer, isBinary: boolean) => void): void;
  on(event: "close", fn: () => void): void;
  on(event: "error", fn: (err: Error) => void): void;
}
interface WsServer {
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, cb: (ws: WsSocket) => void): void;
}
const OPEN = 1;

export interface TerminalOptions {
  /** largest message a client may send (ws maxPayload); input is typed or pasted, never megabytes */
  maxPayloadBytes?: number;
  /** output handed to the socket and not yet written out above which the command's output is paused */
  highWaterBytes?: number;
  /** how often an open terminal re-touches the sandbox's activity (it holds the sandbox active) */
  touchEveryMs?: number;
  /** terminals one owner may have open (and opening) at once; one more is a 429 before anything starts */
  maxPerOwner?: number;
}

export const DEFAULT_TERMINAL_OPTIONS = {
  maxPayloadBytes: 1 << 20,
  highWaterBytes: 256 * 1024,
  touchEveryMs: 10_000,
  maxPerOwner: 100,
};

export interface TerminalDeps {
  manager: Manager;
  tokens: Authenticator;
  logger: Logger;
  clock: Clock;
  /** true when another upgrade listener (the port relay) owns this request */
  claimedElsewhere?: (req: IncomingMessage) => boolean;
}

/** A close reason fits in 123 bytes of UTF-8 (RFC 6455); ws throws on a longer one. */
export function closeReason(message: string): string {
  let r = message;
  while (Buffer.byteLength(r) > 123) r = r.slice(0, -1);
  return r;
}

function bearerOf(h: string | string[] | undefined): string | undefined {
  return typeof h === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(h)?.[1] : undefined;
}

/**
 * The handshake's token: the Authorization header's (the CLI), or the one a browser offers as a
 * subprotocol (parseTerminalProtocols). Both at once is refused: which one counts would be a guess.
 */
export function terminalToken(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  const { token } = parseTerminalProtocols(req.headers["sec-websocket-protocol"]);
  if (token !== undefined && header !== undefined)
    throw new ValidationError(
      "Sec-WebSocket-Protocol",
      "sbx.bearer.…",
      "send the token once: in the Authorization header or as the sbx.bearer. subprotocol, not both",
    );
  return token ?? bearerOf(header);
}

export class TerminalService {
  private readonly wss: WsServer;
  private readonly o: typeof DEFAULT_TERMINAL_OPTIONS;
  /** open terminals: closed (and their commands killed) when the service closes */
  private readonly open = new Set<WsSocket>();
  /** terminals per owner, open or being opened: a burst of opens is refused, not queued */
  private readonly perOwner = new Map<string, number>();

  constructor(
    private readonly deps: TerminalDeps,
    opts: TerminalOptions = {},
  ) {
    this.o = { ...DEFAULT_TERMINAL_OPTIONS, ...opts };
    const Server = WebSocket.WebSocketServer as unknown as new (o: {
      noServer: true;
      maxPayload: number;
      perMessageDeflate: false;
      handleProtocols: (offered: Set<string>) => string | false;
    }) => WsServer;
    this.wss = new Server({
      noServer: true,
      maxPayload: this.o.maxPayloadBytes,
      perMessageDeflate: false,
      // ws's default selects the first offered protocol, which may be the one carrying the token
      handleProtocols: selectTerminalProtocol,
    });
  }

  register(app: FastifyInstance): void {
    app.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (this.deps.claimedElsewhere?.(req)) return;
      socket.on("error", () => socket.destroy());
      const path = (req.url ?? "/").split("?")[0];
      const m = TERMINAL_PATH.exec(path);
      if (!m) return rawAnswer(socket, 404, errorBody("not_found", `no upgrade route ${JSON.stringify(path)}`));
      void this.accept(req, socket, head, m[1]);
    });
    // preClose: fastify's onClose waits for every connection, and an upgraded one is ours to end
    app.addHook("preClose", async () => {
      for (const ws of this.open) ws.terminate();
    });
  }

  private async accept(req: IncomingMessage, socket: Duplex, head: Buffer, rawId: string): Promise<void> {
    let session: ExecSession | undefined;
    let release: (() => void) | undefined;
    try {
      const who = await identify(this.deps.tokens, terminalToken(req));
      release = this.hold(who.owner);
      if (String(req.headers.upgrade).toLowerCase() !== "websocket" || req.method !== "GET")
        throw new ValidationError(
          "upgrade",
          req.headers.upgrade ?? null,
          "open the terminal as a websocket: GET with Upgrade: websocket",
        );
      let id: string;
      try {
        id = decodeURIComponent(rawId);
      } catch {
        throw new ValidationError("id", rawId, "percent-encode the sandbox id correctly");
      }
      const open = parseTerminalQuery(new URL(req.url ?? "/", "http://terminal").searchParams);
      const stdin = new PassThrough();
      // ownership (another owner's sandbox is a 404), the exec checks and a paused sandbox's wake
      const s = await this.deps.manager.exec(who.owner, id, {
        command: open.command,
        env: open.env,
        cwd: open.cwd,
        stdin,
        pty: open.size,
      });
      session = s;
      let upgraded = false;
      // a handshake ws refuses (a bad key) destroys the socket without calling back: nobody reads
      const held = release;
      socket.once("close", () => {
        if (!upgraded) abandon(s);
        held();
      });
      if (socket.destroyed) {
        held();
        return abandon(s);
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        upgraded = true;
        this.bridge(ws, s, stdin, who.owner, id);
      });
    } catch (err) {
      release?.();
      if (session) abandon(session);
      if (err instanceof SbxError) {
        const headers: Record<string, string> = {};
        if (err.code === "unauthenticated") headers["www-authenticate"] = 'Bearer realm="sbx"';
        const retry = (err as { retryAfterSeconds?: number }).retryAfterSeconds;
        if (retry !== undefined) headers["retry-after"] = String(retry);
        return rawAnswer(socket, HTTP_STATUS[err.code], errorBody(err.code, err.message, err.details), headers);
      }
      this.deps.logger.error({ op: "terminal", err }, "opening a terminal failed");
      rawAnswer(socket, 500, errorBody("internal", "internal error; the service logged the details"));
    }
  }

  // Over 60 lines on purpose: one terminal's two directions, its end and its backpressure share
  // their state in this closure.
  private bridge(ws: WsSocket, session: ExecSession, stdin: PassThrough, owner: string, id: string): void {
    const log = this.deps.logger.child({ op: "terminal", sandbox: id, owner });
    this.open.add(ws);
    const out = session.stdout;
    const ac = new AbortController();
    void this.holdActive(owner, id, ac.signal);
    let ended = false;
    let closed = false;
    // Backpressure: bytes handed to ws and not yet written to the connection. Above the high
    // water the command's output is paused (the helper then stops reading its pty, and the
    // command blocks on write); it resumes once the connection took half of it.
    let inflight = 0;
    let paused = false;
    out.on("data", (chunk: Buffer) => {
      if (closed || ws.readyState !== OPEN) return;
      inflight += chunk.length;
      ws.send(chunk, { binary: true }, () => {
        inflight -= chunk.length;
        if (paused && inflight <= this.o.highWaterBytes / 2) {
          paused = false;
          out.resume();
        }
      });
      if (inflight > this.o.highWaterBytes && !paused) {
        paused = true;
        out.pause();
      }
    });
    session.stderr.resume(); // a pty has one merged stream, on stdout
    ws.on("message", (data, isBinary) => {
      if (isBinary) {
        // input faster than the command reads it waits in the client, not here
        if (!stdin.write(data)) {
          ws.pause();
          stdin.once("drain", () => ws.resume());
        }
        return;
      }
      try {
        const c = parseClientControl(data.toString());
        if (c.type === "resize") session.resize?.({ cols: c.cols, rows: c.rows });
        else session.signal?.(c.signal);
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        log.info({ err: message }, "malformed control frame; closing the terminal");
        send({ type: "error", code: "validation", message });
        ws.close(1008, closeReason(message));
      }
    });
    const send = (c: ServerControl) => ws.readyState === OPEN && ws.send(JSON.stringify(c), { binary: false });
    ws.on("error", (err) => log.debug({ err }, "terminal socket error"));
    ws.on("close", () => {
      closed = true;
      this.open.delete(ws);
      ac.abort();
      // nobody reads any more: kill the command and let what it still prints drain away
      if (!ended) abandon(session);
      out.resume();
      stdin.end();
    });
    void (async () => {
      try {
        const result = await session.result;
        await finished(out).catch(() => undefined);
        ended = true;
        send({ type: "exit", ...result });
        ws.close(1000, "exit");
      } catch (err) {
        ended = true;
        const sbx = err instanceof SbxError;
        if (!sbx) log.error({ err }, "terminal command failed");
        send({
          type: "error",
          code: sbx ? err.code : "internal",
          message: sbx ? err.message : "internal error; the service logged the details",
        });
        ws.close(1011, "command failed");
      } finally {
        stdin.end();
      }
    })();
  }

  /** Counts one more terminal of owner's, or refuses it over maxPerOwner; returns the release (idempotent). */
  private hold(owner: string): () => void {
    const n = this.perOwner.get(owner) ?? 0;
    if (n >= this.o.maxPerOwner)
      throw new CapacityError(
        `terminals: ${n} of yours are open, the most one owner may have (${this.o.maxPerOwner}); close one and retry`,
        1,
        { open: n, limit: this.o.maxPerOwner },
      );
    this.perOwner.set(owner, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.perOwner.get(owner) ?? 1) - 1;
      if (left > 0) this.perOwner.set(owner, left);
      else this.perOwner.delete(owner);
    };
  }

  /** An open terminal counts as activity, as an open port connection does (idle timeout, auto-pause). */
  private async holdActive(owner: string, id: string, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.deps.clock.sleep(this.o.touchEveryMs, signal);
      } catch {
        return; // closed
      }
      // get() records activity; a sandbox gone meanwhile ends the terminal by itself
      await this.deps.manager.get(owner, id).catch(() => undefined);
    }
  }
}

function abandon(session: ExecSession): void {
  session.kill();
  session.stdout.resume();
  session.stderr.resume();
}

/** The route's plain-HTTP side: documented in the OpenAPI document, and a 400 for a GET without the upgrade. */
export const terminalRoutes: RouteDef[] = [
  {
    method: "GET",
    url: "/v1/sandboxes/:id/terminal",
    operationId: "openTerminal",
    auth: true,
    summary:
      "A terminal (websocket): a command on a pty, default the sandbox's login shell. Query: cols, rows (default 80x24), cmd (repeat: argv), env (repeat: NAME=VALUE), cwd. Binary frames carry bytes both ways; text frames are JSON control: client {type:resize,cols,rows} and {type:signal,signal}; service {type:exit,exitCode,...} then close. A paused sandbox is woken. A browser, which cannot send Authorization on a websocket, offers the subprotocols sbx.terminal.v1 and sbx.bearer.<unpadded base64url token>; the answer selects sbx.terminal.v1. See docs/terminals.md.",
    responses: {
      "101": { description: "switching to the websocket" },
      "400": { description: "a bad query (naming the field), or a GET without Upgrade: websocket" },
      "404": { description: "no such sandbox of the caller's" },
    },
    handler: async (_c, req) => {
      throw new ValidationError(
        "upgrade",
        req.headers.upgrade ?? null,
        "open the terminal as a websocket (Upgrade: websocket), e.g. with `sbx shell ID`",
      );
    },
  },
];
