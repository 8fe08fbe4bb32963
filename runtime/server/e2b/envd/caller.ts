// Who an envd request is for and as whom it runs, read from the request the way the E2B SDK
// sends it: the sandbox from E2b-Sandbox-Id (one base URL for every sandbox) or from the
// 49983-<id>.<domain> host (wildcard DNS); the token from X-Access-Token; the user from
// `Authorization: Basic base64("<user>:")`. Pure: no I/O, so the rules are table-tested.
import { posix } from "node:path";
import { ValidationError } from "../../../core/errors.ts";

/** The port envd listens on inside an E2B sandbox; the host form names it. */
export const ENVD_PORT = 49983;

/** E2B resolves relative paths against the user's home; an sbx sandbox's home (HOME, default cwd) is /workspace. */
export const SANDBOX_HOME = "/workspace";

/**
 * The users an E2B agent names. An sbx sandbox runs everything as its one unprivileged uid, so
 * both map to it: "root" gives no extra rights (docs/e2b.md says so).
 */
const KNOWN_USERS = new Set(["user", "root"]);

type HeaderValue = string | string[] | undefined;

function single(v: HeaderValue): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** The sandbox id the request names, or undefined when it names none. */
export function sandboxIdFrom(headers: Record<string, HeaderValue>): string | undefined {
  const id = single(headers["e2b-sandbox-id"])?.trim();
  if (id) return id;
  const host = single(headers.host) ?? single(headers[":authority"]);
  const m = host ? new RegExp(`^${ENVD_PORT}-([^.:]+)\\.`).exec(host) : null;
  return m?.[1];
}

export function accessTokenFrom(headers: Record<string, HeaderValue>): string | undefined {
  const t = single(headers["x-access-token"]);
  return t === undefined || t === "" ? undefined : t;
}

/**
 * The user a call asks to run as (Basic auth header, or the `username` query of /files),
 * checked: undefined and the two E2B names are fine, anything else is a ValidationError.
 */
export function validateUser(field: string, user: string | undefined): void {
  if (user === undefined || user === "" || KNOWN_USERS.has(user)) return;
  throw new ValidationError(
    field,
    user,
    'an sbx sandbox has one user: send "user" or "root" (both run as the sandbox\'s unprivileged uid) or none',
  );
}

/** The user named by `Authorization: Basic base64("<user>:")`, or undefined without one. */
export function userFromAuthorization(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) throw new ValidationError("authorization", header, 'send "Basic " + base64("<user>:"), as the E2B SDK does');
  const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon < 0 ? decoded : decoded.slice(0, colon);
}

/**
 * An absolute sandbox path for what the caller wrote: relative paths are taken from the home
 * directory as E2B does, `~` too. No NUL (the kernel would cut the path there).
 */
export function resolveSandboxPath(field: string, path: string | undefined): string {
  if (typeof path !== "string" || path === "")
    throw new ValidationError(field, path, "send a path inside the sandbox, e.g. /workspace/notes.txt");
  if (path.includes("\0")) throw new ValidationError(field, path, "a path cannot contain a NUL byte");
  const expanded = path === "~" ? SANDBOX_HOME : path.startsWith("~/") ? SANDBOX_HOME + path.slice(1) : path;
  return posix.resolve(SANDBOX_HOME, expanded);
}
