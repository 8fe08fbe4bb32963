// The client side of the terminal websocket (runtime/server/terminal.ts, docs/terminals.md): an
// ExecRequest with `pty` becomes GET /v1/sandboxes/{id}/terminal, and the socket becomes an
// ExecSession (stdout the terminal's bytes, resize and signal as control frames, the result from
// the exit frame), so `sbx shell` runs over the Manager seam in both of the CLI's modes. `ws` is
// loaded at the first terminal, never at the CLI's start.
import type { IncomingMessage } from "node:http";
import { PassThrough, type Readable } from "node:stream";
import { SbxError, UpstreamError, ValidationError } from "../core/errors.ts";
import { type ServerControl, terminalQuery } from "../core/terminal.ts";
import type { ExecRequest, ExecResult, ExecSession, TerminalSize } from "../core/types.ts";

interface WsClient {
  readonly readyState: number;
  readonly bufferedAmount: number;
  send(data: Buffer | string, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  pause(): void;
  resume(): void;
  on(event: "message", fn: (data: Buffer, isBinary: boolean) => void): void;
  on(event: "error", fn: (err: Error) => void): void;
  once(event: "open", fn: () => void): void;
  once(event: "close", fn: (code: number, reason: Buffer) => void): void;
  once(event: "unexpected-response", fn: (req: unknown, res: IncomingMessage) => void): void;
}
type WsConstructor = new (url: string, opts: { headers: Record<string, string>; maxPayload: number }) => WsClient;

const OPEN = 1;
/** input handed to the socket and not yet sent, above which reading the input pauses */
const INPUT_HIGH_WATER = 256 * 1024;

export interface TerminalTarget {
  server: string;
  token?: string;
  /** turns a refusal's JSON body into the domain error the rest of the client throws */
  errorFrom(body: string, status: number, retryAfterSeconds: number): SbxError;
}

/** Opens the terminal; resolves once the service upgraded (every refusal comes before that, as an SbxError). */
export async function terminalExec(t: TerminalTarget, id: string, req: ExecRequest & { pty: TerminalSize }) {
  if (req.timeoutMs !== undefined)
    throw new ValidationError(
      "timeoutMs",
      req.timeoutMs,
      "a terminal has no timeout: leave it out and kill the session",
    );
  // loaded when a terminal opens, not at every CLI start; a literal import, so bundles carry it
  const WebSocket = (await import("isomorphic-ws")).default as unknown as WsConstructor;
  const query = terminalQuery({ size: req.pty, command: req.command, env: req.env, cwd: req.cwd });
  const url = `${t.server.replace(/^http/, "ws")}/v1/sandboxes/${encodeURIComponent(id)}/terminal?${query}`;
  const ws = new WebSocket(url, {
    headers: t.token ? { authorization: `Bearer ${t.token}` } : {},
    maxPayload: 64 * 1024 * 1024,
  });
  // listening before the open: the first output can arrive with the handshake's answer, and ws
  // emits it in the same tick as 'open'
  const { session, startInput } = sessionOver(ws, req.stdin);
  await new Promise<void>((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("unexpected-response", (_r, res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c));
      res.on("error", () => undefined);
      res.on("end", () => reject(t.errorFrom(body, res.statusCode ?? 0, Number(res.headers["retry-after"] ?? 1))));
    });
    ws.on("error", (err) => reject(new UpstreamError(`cannot open the terminal at ${t.server}: ${err.message}`)));
  }).catch((err: unknown) => {
    session.result.catch(() => undefined); // refused: the error is the open's, not the session's
    throw err;
  });
  startInput();
  return session;
}

// Over 60 lines on purpose: one socket's two directions and its end share their state here.
function sessionOver(ws: WsClient, stdin: ExecRequest["stdin"]): { session: ExecSession; startInput(): void } {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  stderr.end(); // a terminal has one merged stream
  let settle!: { resolve: (r: ExecResult) => void; reject: (e: Error) => void };
  const result = new Promise<ExecResult>((resolve, reject) => (settle = { resolve, reject }));
  let outcome: ExecResult | SbxError | undefined;
  ws.on("message", (data, isBinary) => {
    if (isBinary) {
      // a slow reader (a terminal behind a slow link) slows the socket, not our memory
      if (!stdout.write(data)) {
        ws.pause();
        stdout.once("drain", () => ws.resume());
      }
      return;
    }
    let c: ServerControl;
    try {
      c = JSON.parse(data.toString()) as ServerControl;
    } catch {
      return; // a newer service's frame this client does not know
    }
    if (c.type === "exit") {
      const { type: _t, ...r } = c;
      outcome = r;
    } else if (c.type === "error") outcome = new SbxError(c.code as SbxError["code"], c.message);
  });
  ws.on("error", () => undefined); // the close that follows reports it
  ws.once("close", (code, reason) => {
    stdout.end();
    if (outcome instanceof SbxError) settle.reject(outcome);
    else if (outcome) settle.resolve(outcome);
    else
      settle.reject(
        new UpstreamError(
          `the terminal closed without an exit (websocket close ${code}${reason.length ? `: ${reason}` : ""})`,
        ),
      );
  });
  const send = (data: Buffer | string, cb?: () => void) => {
    if (ws.readyState === OPEN) ws.send(data, cb);
    else cb?.();
  };
  const session: ExecSession = {
    stdout,
    stderr,
    result,
    kill: () => ws.close(1000, "killed by the client"),
    resize: (size) => send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows })),
    signal: (sig) => send(JSON.stringify({ type: "signal", signal: sig })),
  };
  const startInput = () => {
    if (stdin instanceof Uint8Array) send(Buffer.from(stdin));
    else if (stdin) pumpInput(stdin, ws, send);
  };
  return { session, startInput };
}

/** Input bytes as binary frames, reading paused while too much waits to be sent. */
function pumpInput(input: Readable, ws: WsClient, send: (d: Buffer, cb?: () => void) => void): void {
  input.on("error", () => undefined); // a broken input ends it; the terminal goes on until it exits
  input.on("data", (chunk: Buffer | string) => {
    const b = Buffer.from(chunk);
    send(b, () => {
      if (input.isPaused() && ws.bufferedAmount < INPUT_HIGH_WATER / 2) input.resume();
    });
    if (ws.bufferedAmount > INPUT_HIGH_WATER) input.pause();
  });
  ws.once("close", () => input.destroy());
}
