// The terminal websocket's wire (GET /v1/sandboxes/{id}/terminal, docs/terminals.md), shared by the
// service and its clients (`sbx shell`, bench/keystroke.ts) so the two sides cannot drift: the
// query that opens a terminal, the JSON control frames, and the shell a terminal runs when no
// command is given. Binary frames carry the terminal's bytes both ways; text frames are control.
// No I/O here: parsing and checking only, each refusal a ValidationError naming the field.
import { ValidationError } from "./errors.ts";
import { TERMINAL_LIMITS } from "./execInput.ts";
import type { ExecResult, TerminalSize } from "./types.ts";

/** The route's path; the id is group 1 (still percent-encoded). */
export const TERMINAL_PATH = /^\/v1\/sandboxes\/([^/?#]+)\/terminal$/;

export const DEFAULT_TERMINAL_SIZE: TerminalSize = { cols: 80, rows: 24 };

/**
 * What a terminal runs without `cmd`: the sandbox's login shell, bash where the image has it,
 * else sh (every image has sh; a minimal one may have nothing else).
 */
export const DEFAULT_TERMINAL_COMMAND = [
  "sh",
  "-c",
  "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l",
];

/**
 * Control frames are a few dozen bytes; anything longer than this is refused unparsed, so a
 * hostile text frame costs no JSON parse of a megabyte.
 */
export const MAX_CONTROL_FRAME_BYTES = 1024;

/** What opens a terminal: the query's fields, checked, with the defaults applied. */
export interface TerminalOpen {
  size: TerminalSize;
  command: string[];
  env?: Record<string, string>;
  cwd?: string;
}

/** Client -> service. */
export type ClientControl = { type: "resize"; cols: number; rows: number } | { type: "signal"; signal: number };

/** Service -> client: the command's end (then a normal close), or why the terminal failed. */
export type ServerControl = ({ type: "exit" } & ExecResult) | { type: "error"; code: string; message: string };

const QUERY_KEYS = new Set(["cols", "rows", "cmd", "env", "cwd"]);
const SIZE_FIX = `from ${TERMINAL_LIMITS.min} to ${TERMINAL_LIMITS.max}, e.g. cols=80&rows=24`;

function windowField(field: "cols" | "rows", v: unknown): number {
  const n = typeof v === "string" && /^\d{1,7}$/.test(v) ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n) || n < TERMINAL_LIMITS.min || n > TERMINAL_LIMITS.max)
    throw new ValidationError(field, v, `use a whole number of ${field === "cols" ? "columns" : "rows"} ${SIZE_FIX}`);
  return n;
}

/** The one value of a key that may appear once; a repeat is a mistake worth naming. */
function single(params: URLSearchParams, key: string): string | undefined {
  const all = params.getAll(key);
  if (all.length > 1) throw new ValidationError(key, all, `give ${key} once`);
  return all[0];
}

/**
 * The query of a terminal request as what to run. Unknown keys are refused (a typo must not
 * become a default); command, env and cwd are checked again, with everything else an exec
 * carries, by Manager.exec.
 */
export function parseTerminalQuery(params: URLSearchParams): TerminalOpen {
  for (const key of params.keys())
    if (!QUERY_KEYS.has(key))
      throw new ValidationError(
        key,
        params.get(key),
        `unknown query parameter; a terminal takes ${[...QUERY_KEYS].join(", ")} (cmd and env repeat)`,
      );
  const cols = single(params, "cols");
  const rows = single(params, "rows");
  const size = {
    cols: cols === undefined ? DEFAULT_TERMINAL_SIZE.cols : windowField("cols", cols),
    rows: rows === undefined ? DEFAULT_TERMINAL_SIZE.rows : windowField("rows", rows),
  };
  const cmd = params.getAll("cmd");
  let env: Record<string, string> | undefined;
  for (const pair of params.getAll("env")) {
    const i = pair.indexOf("=");
    if (i <= 0) throw new ValidationError("env", pair, "use env=NAME=VALUE, once per variable");
    env ??= {};
    env[pair.slice(0, i)] = pair.slice(i + 1);
  }
  const cwd = single(params, "cwd");
  if (cwd === "")
    throw new ValidationError("cwd", cwd, "give an absolute directory, e.g. cwd=/workspace, or leave it out");
  return { size, command: cmd.length ? cmd : DEFAULT_TERMINAL_COMMAND, env, cwd };
}

/** The query that opens `open` (what parseTerminalQuery reads back). */
export function terminalQuery(open: Partial<TerminalOpen>): string {
  const q = new URLSearchParams();
  if (open.size) {
    q.set("cols", String(open.size.cols));
    q.set("rows", String(open.size.rows));
  }
  for (const c of open.command ?? []) q.append("cmd", c);
  for (const [k, v] of Object.entries(open.env ?? {})) q.append("env", `${k}=${v}`);
  if (open.cwd !== undefined) q.set("cwd", open.cwd);
  return q.toString();
}

const CONTROL_EXAMPLE = 'send {"type":"resize","cols":80,"rows":24} or {"type":"signal","signal":2}';

/** A client's text frame as a control message; anything else is a ValidationError naming what is wrong. */
export function parseClientControl(text: string): ClientControl {
  if (text.length > MAX_CONTROL_FRAME_BYTES)
    throw new ValidationError(
      "frame",
      `${text.length} characters`,
      `a control frame is at most ${MAX_CONTROL_FRAME_BYTES} bytes; send terminal input as binary frames`,
    );
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    throw new ValidationError("frame", text, `a text frame is a JSON control message: ${CONTROL_EXAMPLE}`);
  }
  if (!msg || typeof msg !== "object" || Array.isArray(msg))
    throw new ValidationError("frame", msg, `a control message is a JSON object: ${CONTROL_EXAMPLE}`);
  const m = msg as Record<string, unknown>;
  if (m.type === "resize") {
    const size = { cols: windowField("cols", m.cols), rows: windowField("rows", m.rows) };
    return { type: "resize", ...size };
  }
  if (m.type === "signal") {
    const s = m.signal;
    if (typeof s !== "number" || !Number.isInteger(s) || s < 1 || s > 64)
      throw new ValidationError("signal", s, "use a signal number from 1 to 64, e.g. 2 (SIGINT, what ^C sends)");
    return { type: "signal", signal: s };
  }
  throw new ValidationError("type", m.type, `unknown control message; ${CONTROL_EXAMPLE}`);
}

/**
 * Browser authentication (docs/terminals.md, "From a browser"): a browser's WebSocket cannot send an
 * Authorization header, but it can offer subprotocols. The client offers TERMINAL_PROTOCOL and
 * BEARER_PROTOCOL_PREFIX + base64url(token); the service reads the token from there exactly as
 * from the header and selects TERMINAL_PROTOCOL alone, so the token is never echoed. Each replica
 * checks the token itself, as for every request: nothing is shared between replicas.
 */
export const TERMINAL_PROTOCOL = "sbx.terminal.v1";
export const BEARER_PROTOCOL_PREFIX = "sbx.bearer.";

/** What names the protocol entry in a refusal: the entry itself would carry the token. */
const BEARER_SHOWN = `${BEARER_PROTOCOL_PREFIX}…`;
const PROTOCOL_FIELD = "Sec-WebSocket-Protocol";
const OFFER_EXAMPLE = `new WebSocket(url, ["${TERMINAL_PROTOCOL}", "${BEARER_PROTOCOL_PREFIX}" + base64url(token)])`;
/** RFC 6455 4.1: each offered subprotocol is an HTTP token (RFC 7230 tchar) */
const PROTOCOL_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The subprotocol entry that carries `token` (what a client offers beside TERMINAL_PROTOCOL). */
export function bearerProtocol(token: string): string {
  return BEARER_PROTOCOL_PREFIX + Buffer.from(token, "utf8").toString("base64url");
}

/**
 * The protocols a handshake offers, and the bearer token among them if any. A malformed header,
 * two bearer entries, a bearer entry that is not base64url, or a bearer entry offered without
 * TERMINAL_PROTOCOL (the protocol the service will select) is a ValidationError naming the
 * header; its value is shown with the token elided.
 */
export function parseTerminalProtocols(header: string | undefined): { offered: string[]; token?: string } {
  if (header === undefined) return { offered: [] };
  const offered = header.split(",").map((p) => p.trim());
  const shown = offered.map((p) => (p.startsWith(BEARER_PROTOCOL_PREFIX) ? BEARER_SHOWN : p)).join(", ");
  if (offered.some((p) => !PROTOCOL_TOKEN.test(p)) || new Set(offered).size !== offered.length)
    throw new ValidationError(
      PROTOCOL_FIELD,
      shown,
      "offer distinct subprotocols separated by commas, each an HTTP token (letters, digits, . _ - and the like)",
    );
  const bearers = offered.filter((p) => p.startsWith(BEARER_PROTOCOL_PREFIX));
  if (bearers.length === 0) return { offered };
  if (bearers.length > 1)
    throw new ValidationError(PROTOCOL_FIELD, shown, `offer one ${BEARER_SHOWN} entry: ${OFFER_EXAMPLE}`);
  if (!offered.includes(TERMINAL_PROTOCOL))
    throw new ValidationError(
      PROTOCOL_FIELD,
      shown,
      `offer ${TERMINAL_PROTOCOL} beside the token, the protocol the service selects: ${OFFER_EXAMPLE}`,
    );
  const encoded = bearers[0].slice(BEARER_PROTOCOL_PREFIX.length);
  const token = /^[A-Za-z0-9_-]+$/.test(encoded) ? Buffer.from(encoded, "base64url").toString("utf8") : "";
  // base64url decoding is lenient: only an exact round trip is the token the client encoded
  if (!token || Buffer.from(token, "utf8").toString("base64url") !== encoded)
    throw new ValidationError(
      PROTOCOL_FIELD,
      shown,
      `encode the token as unpadded base64url (RFC 4648 §5) after ${BEARER_PROTOCOL_PREFIX}: ${OFFER_EXAMPLE}`,
    );
  return { offered, token };
}

/** The protocol the service answers a handshake with: TERMINAL_PROTOCOL when offered, never a bearer entry. */
export function selectTerminalProtocol(offered: Iterable<string>): string | false {
  for (const p of offered) if (p === TERMINAL_PROTOCOL) return p;
  return false;
}
