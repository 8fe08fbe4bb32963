// The only place that reads stack config. Collects every `sbx:*` key, parses JSON values,
// and hands them to the pure schema; secrets stay Outputs and never reach the schema.
import * as pulumi from "@pulumi/pulumi";
import { checkTokenKey } from "../components/runtime/config.ts";
import type { PlatformConfig } from "../components/shared/platformConfig.ts";
import type { Raw } from "./readers.ts";
import { SECRET_CONFIG_KEYS, validatePlatformConfig } from "./schema.ts";

export interface StackConfig {
  config: PlatformConfig;
  apiTokens?: pulumi.Output<Record<string, string>>;
  kubeconfig?: pulumi.Output<string>;
  registryTokenKey?: pulumi.Output<string>;
  region?: string;
}

/** Structured values arrive as JSON text; plain strings ("dev", "eks") stay strings. */
export function parseConfigValue(text: string): unknown {
  const t = text.trim();
  if (!/^[[{"]|^(true|false|null)$|^-?\d/.test(t)) return text;
  try {
    return JSON.parse(t);
  } catch {
    return text;
  }
}

export function readStackConfig(project = pulumi.getProject()): StackConfig {
  const cfg = new pulumi.Config(project);
  const raw: Raw = {};
  const secret = new Set<string>(SECRET_CONFIG_KEYS);
  for (const fullKey of Object.keys(pulumi.runtime.allConfig())) {
    if (!fullKey.startsWith(`${project}:`)) continue;
    const key = fullKey.slice(project.length + 1);
    // presence only: the schema checks that required secrets exist, never their values
    raw[key] = secret.has(key) ? "(secret)" : parseConfigValue(cfg.get(key) ?? "");
  }
  const config = validatePlatformConfig(raw);
  // the one secret value checked here: a key that is not the certificate's would leave both
  // Deployments crash-looping at start-up, so it fails now, before any resource (never printed)
  const token = config.snapshots.registryToken;
  if (token) checkTokenKey(cfg.require("registryTokenKey"), token.certificate);
  return {
    config,
    apiTokens: raw.apiTokens ? cfg.requireSecretObject<Record<string, string>>("apiTokens") : undefined,
    kubeconfig: raw.kubeconfig ? cfg.requireSecret("kubeconfig") : undefined,
    registryTokenKey: raw.registryTokenKey ? cfg.requireSecret("registryTokenKey") : undefined,
    region: config.mode === "eks" ? new pulumi.Config("aws").get("region") : undefined,
  };
}
