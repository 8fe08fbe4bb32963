// The shares document as one JSON annotation: the layout before one annotation per replica
// (shareEntries.ts), still read so a rolling update moves it, and the one place that decides what
// a valid entry is. Parsing is strict: a document we cannot read is an error the ledger refuses to
// write over (it would forget other replicas' shares and over-admit). Replicas of the old layout
// run this same parser, which is why the tombstone left in this annotation stops them writing.
import type { ShareEntry, SharesDoc, ShareVec } from "./sharePlan.ts";

export const SHARES_ANNOTATION = "sbx.dev/budget-shares";
/** On each Sandbox record: the replica whose share admitted it. */
export const ADMITTED_BY_ANNOTATION = "sbx.dev/admitted-by";

export { sharesLeaseName } from "./sharePlan.ts";

export function emptyDoc(): SharesDoc {
  return { replicas: {} };
}

export function parseSharesDoc(raw: string | undefined): SharesDoc {
  if (raw === undefined || raw === "") return emptyDoc();
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (err) {
    throw new Error(
      `annotation ${SHARES_ANNOTATION} is not JSON (${(err as Error).message}); delete the Lease to reset the shares`,
    );
  }
  const replicas = (v as { replicas?: unknown })?.replicas;
  if (!replicas || typeof replicas !== "object")
    throw new Error(`annotation ${SHARES_ANNOTATION} has no replicas object; delete the Lease to reset the shares`);
  const out: SharesDoc = { replicas: {} };
  for (const [id, e] of Object.entries(replicas as Record<string, unknown>)) out.replicas[id] = parseEntry(id, e);
  return out;
}

/** One replica's entry, by the rules every layout shares (shareEntries.ts reads its annotations with it). */
export function parseEntry(id: string, e: unknown): ShareEntry {
  const x = e as Partial<ShareEntry>;
  if (!x || !isVec(x.share) || !isVec(x.used) || typeof x.want !== "boolean" || !Number.isInteger(x.beat))
    throw new Error(
      `annotation ${SHARES_ANNOTATION}: replica ${id} has a malformed entry ${JSON.stringify(e)}; delete the Lease to reset the shares`,
    );
  const wantDims = x.wantDims;
  if (wantDims !== undefined && !(Array.isArray(wantDims) && wantDims.every((d) => typeof d === "string")))
    throw new Error(
      `annotation ${SHARES_ANNOTATION}: replica ${id} has a malformed entry ${JSON.stringify(e)}; delete the Lease to reset the shares`,
    );
  if (x.retired !== undefined && typeof x.retired !== "boolean")
    throw new Error(
      `annotation ${SHARES_ANNOTATION}: replica ${id} has a malformed entry ${JSON.stringify(e)}; delete the Lease to reset the shares`,
    );
  return {
    share: x.share,
    used: x.used,
    want: x.want,
    beat: x.beat as number,
    ...(x.retired ? { retired: true } : {}),
    ...(wantDims?.length ? { wantDims } : {}),
  };
}

/** cpu and memory, and the team limits' dimensions when present (sharePlan.ts) */
function isVec(v: unknown): v is ShareVec {
  const x = v as ShareVec;
  if (!x || !Number.isFinite(x.cpuMillis) || !Number.isFinite(x.memoryBytes)) return false;
  if (x.dims === undefined) return true;
  return typeof x.dims === "object" && x.dims !== null && Object.values(x.dims).every((n) => Number.isFinite(n));
}

export function formatSharesDoc(doc: SharesDoc): string {
  return JSON.stringify(doc);
}
