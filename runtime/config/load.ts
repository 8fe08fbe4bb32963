// Where the runtime's config comes from: the JSON file named by SBX_CONFIG (the ConfigMap the
// Pulumi package mounts, or a local file), else the schema's defaults (platform local).
import { readFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { ValidationError } from "../core/errors.ts";
import { validateRuntimeConfig, type RuntimeConfig } from "./schema.ts";

export function loadRuntimeConfig(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): { config: RuntimeConfig; source: string } {
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
    throw new ValidationError("SBX_CONFIG", path, `cannot read the config file (${(e as Error).message}); point SBX_CONFIG at a JSON file or unset it for the defaults`);
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
