// Metadata keys that belong to the service's own layers (the E2B layer's state: its timeout end
// and access-token hashes, runtime/server/e2b/shape.ts RESERVED). Our /v1 API never shows them and
// never lets a caller set them, so a tenant can neither read a token hash nor forge an end.
import { ValidationError } from "../core/errors.ts";
import type { Sandbox } from "../core/types.ts";
import { RESERVED } from "./e2b/shape.ts";

const isReserved = (key: string): boolean => key.startsWith(RESERVED.prefix);

/** A 400 naming the first key under a reserved prefix. */
export function refuseReserved(metadata: Record<string, unknown> | undefined | null): void {
  for (const k of Object.keys(metadata ?? {}))
    if (isReserved(k))
      throw new ValidationError(
        `metadata.${k}`,
        k,
        `keys starting with ${RESERVED.prefix} are reserved for the service's E2B layer; rename the key`,
      );
}

/** The sandbox as /v1 shows it: without reserved metadata. */
export function visible(s: Sandbox): Sandbox {
  const keys = Object.keys(s.metadata);
  if (!keys.some(isReserved)) return s;
  return { ...s, metadata: Object.fromEntries(keys.filter((k) => !isReserved(k)).map((k) => [k, s.metadata[k]])) };
}
