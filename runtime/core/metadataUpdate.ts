// The rules for changing a sandbox's metadata after create: the same keys, values and count
// limits create applies (spec.ts), checked on the patch and on the metadata it leaves behind.
// Pure, so the Manager stays a thin audited call and the rules are table-tested.
import { ValidationError } from "./errors.ts";
import { LIMITS, META_KEY } from "./spec.ts";
import type { MetadataPatch } from "./types.ts";

/** The metadata after `patch`; throws a ValidationError naming the key when the patch is not allowed. */
export function resolveMetadataUpdate(current: Record<string, string>, patch: unknown): Record<string, string> {
  if (!patch || typeof patch !== "object" || Array.isArray(patch))
    throw new ValidationError("metadata", patch, 'use an object of key: "value" (or null to remove the key)');
  const next = { ...current };
  for (const [k, v] of Object.entries(patch as MetadataPatch)) {
    if (!META_KEY.test(k))
      throw new ValidationError(
        `metadata.${k}`,
        k,
        "metadata keys are 1-63 letters, digits, '.', '_' or '-', starting and ending alphanumeric",
      );
    if (v === null) {
      delete next[k];
      continue;
    }
    if (typeof v !== "string" || v.length > LIMITS.metadataValueChars || v.includes("\0"))
      throw new ValidationError(
        `metadata.${k}`,
        typeof v === "string" ? `${v.slice(0, 20)}...` : v,
        `use a string of at most ${LIMITS.metadataValueChars} characters without NUL bytes, or null to remove the key`,
      );
    next[k] = v;
  }
  const n = Object.keys(next).length;
  if (n > LIMITS.metadataEntries)
    throw new ValidationError(
      "metadata",
      `${n} entries`,
      `a sandbox has at most ${LIMITS.metadataEntries} metadata entries; remove some (set them to null)`,
    );
  return next;
}
