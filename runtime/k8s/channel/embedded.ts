// The helper a deployed runtime copies into pods. A runtime bundle (components/runtime/bundle.ts)
// carries it, gzipped and base64, in a global its banner sets: a manager pod has neither the
// sources nor a compiler, so without it every pod would fall back to one websocket exec per
// command. A runtime started from a checkout has no such global and builds the helper instead.
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import type { HelperBinary } from "./open.ts";

/** the global the bundle's banner sets (keep in step with components/runtime/bundle.ts) */
export const EMBEDDED_HELPER_GLOBAL = "__sbxHelperGz";

let cached: HelperBinary | undefined;

/** The helper the running bundle carries, or undefined when this runtime is not a bundle that has one. */
export function embeddedHelper(): HelperBinary | undefined {
  const b64 = (globalThis as Record<string, unknown>)[EMBEDDED_HELPER_GLOBAL];
  if (typeof b64 !== "string" || b64 === "") return undefined;
  if (!cached) {
    const bytes = gunzipSync(Buffer.from(b64, "base64"));
    cached = { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
  }
  return cached;
}
