// Which sandbox port a request is for, from its path (/v1/sandboxes/{id}/ports/{port}/...) or its
// host ({port}-{id}.{domain}), and what the server inside sees as the path. Pure: strings in,
// a target or a ValidationError out.
import { ValidationError } from "../../core/errors.ts";

export interface PortTarget {
  id: string;
  port: number;
  /** the path and query the server inside gets (the path form's prefix and our token removed) */
  path: string;
  /** the path form's prefix, sent as X-Forwarded-Prefix; absent for the host form */
  prefix?: string;
  /** the per-port access token given as ?sbx_token= (removed from path) */
  queryToken?: string;
}

/** The query parameter a browser can carry a per-port token in (websockets cannot set headers). */
export const TOKEN_PARAM = "sbx_token";

const PATH_FORM = /^\/v1\/sandboxes\/([^/?#]+)\/ports\/([^/?#]+)([/?#].*)?$/s;
/** envd's port: the E2B layer (runtime/server/e2b) owns 49983-{id}.{domain} */
export const ENVD_PORT = 49983;

const HOST_LABEL = /^(\d{1,5})-([a-z0-9][a-z0-9-]{0,62})$/;

/** A port from a URL segment: an integer 1-65535, else a 400 naming the value and the range. */
export function validatePort(value: unknown, field = "port"): number {
  const n =
    typeof value === "number" ? value : typeof value === "string" && /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    throw new ValidationError(field, value, "use a TCP port number from 1 to 65535 (a port inside the sandbox)");
  return n;
}

/** The path-form target of `url`, or undefined when the URL is not a port URL. */
export function pathTarget(url: string): PortTarget | undefined {
  const m = PATH_FORM.exec(url);
  if (!m) return undefined;
  const id = decode("id", m[1]);
  const port = validatePort(decode("port", m[2]));
  const rest = m[3] ?? "";
  const path = rest.startsWith("/") ? rest : `/${rest}`;
  return { id, port, prefix: `/v1/sandboxes/${m[1]}/ports/${m[2]}`, ...withoutToken(path) };
}

/**
 * The host-form target: host `{port}-{id}.{domain}` (port optional), for a service configured
 * with `ports.domain`. Undefined for any other host, so the API keeps its own paths.
 */
export function hostTarget(host: string | undefined, url: string, domain: string | undefined): PortTarget | undefined {
  if (!domain || !host) return undefined;
  const name = host.replace(/:\d+$/, "").toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const m = HOST_LABEL.exec(name.slice(0, -suffix.length));
  if (!m || Number(m[1]) === ENVD_PORT) return undefined;
  return { id: m[2], port: validatePort(m[1]), ...withoutToken(url) };
}

function decode(field: string, s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new ValidationError(field, s, "percent-encode it correctly (%XX with two hex digits)");
  }
}

/** Splits our token parameter out of the query; every other parameter is kept in its order. */
function withoutToken(path: string): { path: string; queryToken?: string } {
  const q = path.indexOf("?");
  if (q < 0) return { path };
  let queryToken: string | undefined;
  const kept = path
    .slice(q + 1)
    .split("&")
    .filter((kv) => {
      if (!kv.startsWith(`${TOKEN_PARAM}=`)) return true;
      queryToken = decode(TOKEN_PARAM, kv.slice(TOKEN_PARAM.length + 1));
      return false;
    });
  const base = path.slice(0, q);
  return { path: kept.length ? `${base}?${kept.join("&")}` : base, queryToken };
}

/** The URLs an exposed port is reached at: always the path form, the host form when a domain is set. */
export function portUrls(base: string, id: string, port: number, domain?: string): { url: string; hostUrl?: string } {
  const url = `${base.replace(/\/+$/, "")}/v1/sandboxes/${id}/ports/${port}/`;
  if (!domain) return { url };
  const scheme = base.startsWith("https:") ? "https" : "http";
  return { url, hostUrl: `${scheme}://${port}-${id}.${domain}/` };
}
