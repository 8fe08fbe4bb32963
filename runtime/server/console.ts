// The web console (console/, docs/console.md): static assets the service serves at /console, with
// no second server. The assets come from the runtime bundle when this process is one (its banner
// sets a global, as it does for the in-sandbox helper), else from dist/console, which `npm ci`
// builds (console/build.ts). Every answer carries a strict Content-Security-Policy: the page
// runs only its own script, talks only to this origin, and cannot be framed. The console is
// refused on a sandbox's preview origin ({port}-{id}.{ports.domain}), whose pages are the
// sandbox's: a console there would share an origin with code the sandbox serves. The page itself
// carries a fresh style nonce per load: xterm.js (the terminal) writes its layout and theme into
// <style> elements, which 'self' alone refuses; the page stamps that nonce on the ones it makes
// (console/src/styleNonce.ts). Scripts stay 'self' only.
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { sendError } from "./requestErrors.ts";

/** the global the runtime bundle's banner sets (keep in step with components/runtime/bundle.ts) */
export const EMBEDDED_CONSOLE_GLOBAL = "__sbxConsoleAssets";

/** file name -> contents; all text (HTML, JS, CSS) */
export type ConsoleAssets = Record<string, string>;

export interface ConsoleOptions {
  /** the preview domain (config ports.domain): the console is never served on a host under it */
  previewDomain?: string;
  /** where built assets are read when the process is not a bundle carrying them (default dist/console) */
  assetsDir?: string;
}

export const CONSOLE_PATH = "/console";

/** The headers every console answer carries, error answers included. */
export const CONSOLE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; "),
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

/** In index.html, where each answer's style nonce goes (on the stylesheet link: console/src/styleNonce.ts). */
export const STYLE_NONCE_PLACEHOLDER = "SBX_STYLE_NONCE";

/** The CSP with style-src allowing <style> elements that carry `nonce` (128 random bits, one per page load). */
export function pageSecurityHeaders(nonce: string): Record<string, string> {
  const csp = CONSOLE_SECURITY_HEADERS["content-security-policy"].replace(
    "style-src 'self'",
    `style-src 'self' 'nonce-${nonce}'`,
  );
  return { ...CONSOLE_SECURITY_HEADERS, "content-security-policy": csp };
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
};

const DEFAULT_DIR = fileURLToPath(new URL("../../dist/console/", import.meta.url));

/** The bundle's assets, or the built ones on disk, or undefined when neither exists. */
export function loadConsoleAssets(dir = DEFAULT_DIR): ConsoleAssets | undefined {
  const embedded = (globalThis as Record<string, unknown>)[EMBEDDED_CONSOLE_GLOBAL];
  if (embedded && typeof embedded === "object") return embedded as ConsoleAssets;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  const assets: ConsoleAssets = {};
  for (const name of names) if (TYPES[extname(name)]) assets[name] = readFileSync(join(dir, name), "utf8");
  return assets["index.html"] ? assets : undefined;
}

/** True when `host` is a sandbox's preview origin (a name under the preview domain). */
export function isPreviewHost(host: string | undefined, previewDomain: string | undefined): boolean {
  if (!previewDomain || !host) return false;
  const name = host.replace(/:\d+$/, "").replace(/\.$/, "").toLowerCase();
  return name.endsWith(`.${previewDomain.toLowerCase().replace(/\.$/, "")}`);
}

export function registerConsole(app: FastifyInstance, opts: ConsoleOptions = {}): void {
  // read on first use (and again while missing), so a build after start is picked up
  let assets: ConsoleAssets | undefined;
  const serve = (req: FastifyRequest, reply: FastifyReply, name: string) => {
    reply.headers(CONSOLE_SECURITY_HEADERS);
    if (isPreviewHost(req.headers.host, opts.previewDomain))
      return sendError(
        reply,
        404,
        "not_found",
        `the console is not served on a sandbox's preview origin ${JSON.stringify(req.headers.host)}; open ${CONSOLE_PATH}/ on the service's own address`,
        { host: req.headers.host },
      );
    assets ??= loadConsoleAssets(opts.assetsDir);
    if (!assets)
      return sendError(
        reply,
        503,
        "unavailable",
        "the console's assets are not built: run `npm run build:console` (npm ci runs it)",
      );
    const body = assets[name];
    if (body === undefined || !TYPES[extname(name)])
      return sendError(reply, 404, "not_found", `no console file ${JSON.stringify(name)}; open ${CONSOLE_PATH}/`, {
        file: name,
      });
    if (name === "index.html") {
      // a nonce per answer, never cached: a reused nonce would be one an attacker could learn
      const nonce = randomBytes(16).toString("base64");
      return reply
        .headers(pageSecurityHeaders(nonce))
        .header("cache-control", "no-store")
        .type(TYPES[".html"])
        .send(body.replaceAll(STYLE_NONCE_PLACEHOLDER, nonce));
    }
    // the assets are small and change with each build: always revalidated, never stale
    return reply.header("cache-control", "no-cache").type(TYPES[extname(name)]).send(body);
  };
  app.get(CONSOLE_PATH, (req, reply) => {
    reply.headers(CONSOLE_SECURITY_HEADERS);
    if (isPreviewHost(req.headers.host, opts.previewDomain)) return serve(req, reply, "index.html");
    return reply.redirect(`${CONSOLE_PATH}/`, 308);
  });
  app.get(`${CONSOLE_PATH}/`, (req, reply) => serve(req, reply, "index.html"));
  app.get(`${CONSOLE_PATH}/:file`, (req, reply) => serve(req, reply, (req.params as { file: string }).file));
}
