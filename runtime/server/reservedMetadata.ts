// Metadata keys that belong to the service's own layers (the E2B layer's state: its timeout end
// and access-token hashes, runtime/server/e2b/shape.ts RESERVED). Our /v1 API never shows them and
// never lets a caller set them, so a tenant can neither read a token hash nor forge an end. The
// port relay's exposures (sbx.ports.<port>, runtime/server/ports/metadataAccess.ts) likewise.
import { ValidationError } from "../core/errors.ts";
import type { Sandbox } from "../core/types.ts";
import { SERVICE_PREFIXES, serviceKey } from "./e2b/shape.ts";

const isReserved = (key: string): boolean => serviceKey(key) !== undefined;

/** A 400 naming the first key under a reserved prefix. */
export function refuseReserved(metadata: Record<string, unknown> | undefined | null): void {
  for (const k of Object.keys(metadata ?? {})) {
    const prefix = serviceKey(k) as keyof typeof SERVICE_PREFIXES | undefined;
    if (prefix)
      throw new ValidationError(
        `metadata.${k}`,
        k,
        `keys starting with ${prefix} are reserved for ${SERVICE_PREFIXES[prefix]}; rename the key`,
      );
  }
}

/** The sandbox as /v1 shows it: without reserved metadata. */
export function visible(s: Sandbox): Sandbox {
  const keys = Object.keys(s.metadata);
  if (!keys.some(isReserved)) return s;
  return { ...s, metadata: Object.fromEntries(keys.filter((k) => !isReserved(k)).map((k) => [k, s.metadata[k]])) };
}
