// Where the runtime's config comes from: the JSON file named by SBX_CONFIG (the ConfigMap the
// Pulumi package mounts, or a local file), else the schema's defaults (platform local); then
// SBX_PORT and SBX_HOST over config.listen. The one place the runtime reads its environment:
// every variable is validated here and an error names it, its value and the fix.
import { readFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { ValidationError } from "../core/errors.ts";
import { type ResolvedRole, resolveRole } from "./role.ts";
import { type RuntimeConfig, validateRuntimeConfig } from "./schema.ts";

export function loadRuntimeConfig(
  env: NodeJS.ProcessEnv = process.env,
  cwd = process.cwd(),
): { config: RuntimeConfig; source: string } {
  const { config, source } = loadConfigDocument(env, cwd);
  return { config: { ...config, listen: listenFromEnv(env, config.listen) }, source };
}

function loadConfigDocument(env: NodeJS.ProcessEnv, cwd: string): { config: RuntimeConfig; source: string } {
  const path = env.SBX_CONFIG;
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(cwd, p));
  if (!path) {
    const config = validateRuntimeConfig({});
    config.local = { ...config.local, stateDir: abs(config.local.stateDir) };
    return { config, source: "defaults" };
  }
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ValidationError(
      "SBX_CONFIG",
      path,
      `cannot read the config file (${(e as Error).message}); point SBX_CONFIG at a JSON file or unset it for the defaults`,
    );
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ValidationError("SBX_CONFIG", path, `must contain JSON: ${(e as Error).message}`);
  }
  const config = validateRuntimeConfig(doc);
  // relative paths in a config file are relative to the directory it was started from
  config.local = { ...config.local, stateDir: abs(config.local.stateDir) };
  return { config, source: path };
}

/** The tokens file: config.tokensPath, else <local.stateDir>/tokens.json. */
export function tokensPathFor(config: RuntimeConfig, cwd = process.cwd()): string {
  if (config.tokensPath) return isAbsolute(config.tokensPath) ? config.tokensPath : resolve(cwd, config.tokensPath);
  const state = isAbsolute(config.local.stateDir) ? config.local.stateDir : resolve(cwd, config.local.stateDir);
  return join(state, "tokens.json");
}

/** SBX_PORT / SBX_HOST over config.listen (unset: the config's value). */
function listenFromEnv(env: NodeJS.ProcessEnv, listen: RuntimeConfig["listen"]): RuntimeConfig["listen"] {
  const port = env.SBX_PORT;
  const host = env.SBX_HOST;
  // Number("") is 0 and Number(" 80") is 80: only plain digits are a port
  if (port !== undefined && (!/^\d{1,5}$/.test(port) || Number(port) > 65535)) {
    throw new ValidationError(
      "SBX_PORT",
      port,
      "use a port number 0-65535 (0 picks a free one), or unset it for config.listen.port",
    );
  }
  if (host !== undefined && !/^[A-Za-z0-9.:[\]-]+$/.test(host)) {
    throw new ValidationError(
      "SBX_HOST",
      host,
      "use an address or host name to listen on, e.g. 127.0.0.1 or 0.0.0.0, or unset it for config.listen.host",
    );
  }
  return { host: host ?? listen.host, port: port === undefined ? listen.port : Number(port) };
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

/** What the service process takes from its environment besides the config document. */
export interface ProcessSettings {
  /** SBX_LOG_LEVEL, default info */
  logLevel: string;
  /** SBX_OWNER: the owner of the token minted on the first local start, default "local" */
  owner: string;
  /** the first argument or SBX_ROLE (runtime/config/role.ts), default all */
  role: ResolvedRole;
  /** POD_NAME (the Deployment sets it from the downward API): this replica's Lease identity */
  identity?: string;
}

export function loadProcessSettings(
  env: NodeJS.ProcessEnv = process.env,
  argv: readonly string[] = [],
): ProcessSettings {
  const logLevel = env.SBX_LOG_LEVEL ?? "info";
  if (!LOG_LEVELS.includes(logLevel))
    throw new ValidationError("SBX_LOG_LEVEL", logLevel, `use one of: ${LOG_LEVELS.join(", ")}`);
  const owner = env.SBX_OWNER ?? "local";
  if (owner.trim() === "")
    throw new ValidationError("SBX_OWNER", owner, 'use a non-empty owner name, or unset it for "local"');
  const role = resolveRole(argv, env);
  const identity = env.POD_NAME?.trim() || undefined;
  return { logLevel, owner, role, ...(identity ? { identity } : {}) };
}
