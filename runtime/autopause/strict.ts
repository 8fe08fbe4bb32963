// Reading an untrusted JSON document strictly: every object is a plain object holding only the
// keys we know, and every error is a ValidationError whose value is a short preview (a 10 MB
// string or a 10,000-level nesting must not come back in the error body or go to the logs).
// Pure.
import { ValidationError } from "../core/errors.ts";

const PREVIEW_CHARS = 60;
const PREVIEW_ITEMS = 3;

/** A bounded stand-in for a bad value: short strings and scalars as they are, containers two levels deep. */
export function preview(value: unknown, depth = 0): unknown {
  if (typeof value === "string")
    return value.length <= PREVIEW_CHARS ? value : `${value.slice(0, PREVIEW_CHARS)}...(${value.length} characters)`;
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    if (depth >= 1) return value.length === 0 ? [] : `[...${value.length} items]`;
    const head = value.slice(0, PREVIEW_ITEMS).map((v) => preview(v, depth + 1));
    return value.length > PREVIEW_ITEMS ? [...head, `...(${value.length} items)`] : head;
  }
  const keys = Object.keys(value);
  if (depth >= 1) return keys.length === 0 ? {} : `{...${keys.length} keys}`;
  const out: Record<string, unknown> = {};
  for (const k of keys.slice(0, PREVIEW_ITEMS))
    out[previewKey(k)] = preview((value as Record<string, unknown>)[k], depth + 1);
  if (keys.length > PREVIEW_ITEMS) out["..."] = `${keys.length} keys`;
  return out;
}

function previewKey(k: string): string {
  return k.length <= PREVIEW_CHARS ? k : `${k.slice(0, PREVIEW_CHARS)}...`;
}

/** `field.key` for a plain key, `field["..."]` (cut) for anything else, so a hostile key cannot flood the path. */
export function fieldOf(field: string, key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(key) ? `${field}.${key}` : `${field}[${JSON.stringify(previewKey(key))}]`;
}

/** Throws a ValidationError whose value is a bounded preview. */
export function invalid(field: string, value: unknown, fix: string): never {
  throw new ValidationError(field, preview(value), fix);
}

export type Doc = Readonly<Record<string, unknown>>;

/**
 * `value` as a plain object holding only `keys` (all optional here; callers check required
 * ones). `what` completes "use an object with ...", e.g. "; or leave autoPause.timeout out".
 */
export function strictObject(field: string, value: unknown, keys: readonly string[], what = ""): Doc {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    invalid(field, value, `use an object with ${keys.join(", ")}${what}`);
  }
  for (const k of Object.keys(value)) {
    if (!keys.includes(k))
      invalid(
        fieldOf(field, k),
        (value as Doc)[k],
        `unknown field; ${field} takes only ${keys.join(", ")} (docs/pause-resume.md)`,
      );
  }
  return value as Doc;
}

/** An own property only: a key inherited through the prototype chain is not part of the document. */
export function own(doc: Doc, key: string): unknown {
  return Object.hasOwn(doc, key) ? doc[key] : undefined;
}

/** Present means own and not undefined; null is present (and then rejected by the field's reader). */
export function has(doc: Doc, key: string): boolean {
  return own(doc, key) !== undefined;
}
