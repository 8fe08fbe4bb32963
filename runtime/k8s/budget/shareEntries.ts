// The per-replica layout of the shares Lease: one annotation per replica, so a replica renews
// (or shrinks) its own entry with a JSON patch that tests only that entry, and other replicas'
// writes never make its renewal lose a compare-and-swap. Writes that could put the shares past
// the budget (a growth, retiring or removing others, the migration) still replace the whole
// Lease under its resourceVersion. The old single-document annotation is read as entries and
// replaced by a tombstone the old parser refuses, so an old replica left running in a rolling
// upgrade cannot write and fences itself instead of over-admitting.
import { createHash } from "node:crypto";
import type { ShareEntry, SharesDoc } from "./sharePlan.ts";
import { parseEntry, parseSharesDoc, SHARES_ANNOTATION } from "./sharesDoc.ts";

export const ENTRY_PREFIX = "shares.sbx.dev/";
/** What the old annotation holds once migrated: no `replicas` object, so the old parser refuses it. */
export const TOMBSTONE = JSON.stringify({ layout: "one annotation per replica", prefix: ENTRY_PREFIX });

const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/** The annotation key of a replica's entry: its identity when that is a valid name, else a digest of it. */
export function entryKey(id: string): string {
  const name =
    NAME.test(id) && !id.startsWith("h.") ? id : `h.${createHash("sha256").update(id).digest("hex").slice(0, 32)}`;
  return ENTRY_PREFIX + name;
}

export interface ReadShares {
  doc: SharesDoc;
  /** each replica's annotation value exactly as read: what a renewal's JSON patch tests */
  raw: Record<string, string>;
  /** the old single document still holds entries: the next write must be a whole replace */
  legacy: boolean;
}

export function formatEntry(id: string, e: ShareEntry): string {
  return JSON.stringify({ id, ...e });
}

export function readShares(annotations: Record<string, string> | undefined): ReadShares {
  const out: ReadShares = { doc: { replicas: {} }, raw: {}, legacy: false };
  const a = annotations ?? {};
  const old = a[SHARES_ANNOTATION];
  if (old !== undefined && old !== TOMBSTONE) {
    const doc = parseSharesDoc(old);
    out.legacy = true;
    Object.assign(out.doc.replicas, doc.replicas);
  }
  for (const [key, value] of Object.entries(a)) {
    if (!key.startsWith(ENTRY_PREFIX)) continue;
    const { id, entry } = parseEntryValue(key, value);
    out.doc.replicas[id] = entry;
    out.raw[id] = value;
  }
  return out;
}

function parseEntryValue(key: string, value: string): { id: string; entry: ShareEntry } {
  let v: unknown;
  try {
    v = JSON.parse(value);
  } catch (err) {
    throw new Error(`annotation ${key} is not JSON (${(err as Error).message}); delete the Lease to reset the shares`);
  }
  const id = (v as { id?: unknown })?.id;
  if (typeof id !== "string" || entryKey(id) !== key)
    throw new Error(
      `annotation ${key} names replica ${JSON.stringify(id)}, whose key is not ${key}; delete the Lease to reset the shares`,
    );
  const { id: _id, ...rest } = v as Record<string, unknown>;
  return { id, entry: parseEntry(id, rest) };
}

/** The Lease's annotations after a whole write of doc: others kept, every entry rewritten, the tombstone set. */
export function writeShares(annotations: Record<string, string> | undefined, doc: SharesDoc): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(annotations ?? {})) if (!k.startsWith(ENTRY_PREFIX)) out[k] = v;
  out[SHARES_ANNOTATION] = TOMBSTONE;
  for (const [id, e] of Object.entries(doc.replicas)) out[entryKey(id)] = formatEntry(id, e);
  return out;
}

/** A JSON patch that changes only this replica's entry, and only if it still reads `raw`; next undefined removes it. */
export function ownEntryPatch(id: string, raw: string, next: ShareEntry | undefined): object[] {
  const path = `/metadata/annotations/${entryKey(id).replace(/~/g, "~0").replace(/\//g, "~1")}`;
  const test = { op: "test", path, value: raw };
  return next === undefined
    ? [test, { op: "remove", path }]
    : [test, { op: "replace", path, value: formatEntry(id, next) }];
}
