// Reads a shipped stack file's `sbx:*` values, as the program receives them (keys without the prefix).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";

export function stackRaw(stack: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const file = fileURLToPath(new URL(`../../stacks/Pulumi.${stack}.yaml`, import.meta.url));
  const doc = yaml.load(readFileSync(file, "utf8")) as { config: Record<string, unknown> };
  const raw: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(doc.config)) if (k.startsWith("sbx:")) raw[k.slice(4)] = v;
  return { ...raw, ...extra };
}
