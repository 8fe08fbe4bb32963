// The per-replica layout of the shares Lease: entries round-trip, the old document is read and
// replaced by a tombstone the old parser refuses, and a replica's patch touches its entry only.
import { describe, expect, it } from "vitest";
import { ENTRY_PREFIX, entryKey, ownEntryPatch, readShares, TOMBSTONE, writeShares } from "./shareEntries.ts";
import { parseSharesDoc, SHARES_ANNOTATION } from "./sharesDoc.ts";

const vec = (c: number) => ({ cpuMillis: c, memoryBytes: c * 2 ** 20 });
const entry = (c: number, beat = 1) => ({ share: vec(c), used: vec(0), want: false, beat });

describe("the per-replica shares layout", () => {
  it("round-trips every entry and keeps other annotations", () => {
    const doc = { replicas: { "sbx-mgr-7d9-abc": entry(100), b: { ...entry(5, 3), retired: true } } };
    const a = writeShares({ "other/x": "1" }, doc);
    expect(a["other/x"]).toBe("1");
    expect(a[SHARES_ANNOTATION]).toBe(TOMBSTONE);
    const read = readShares(a);
    expect(read.doc).toEqual(doc);
    expect(read.legacy).toBe(false);
    expect(read.raw.b).toBe(a[entryKey("b")]);
  });

  it("keys an identity that is no valid annotation name by its digest, and checks the key on read", () => {
    const long = `r-${"x".repeat(80)}`;
    expect(entryKey(long)).toMatch(new RegExp(`^${ENTRY_PREFIX.replace(".", "\\.")}h\\.[0-9a-f]{32}$`));
    expect(entryKey("a/b")).not.toContain("a/b");
    expect(entryKey("h.abc")).not.toBe(`${ENTRY_PREFIX}h.abc`); // the digest form cannot be claimed by an identity
    const a = writeShares({}, { replicas: { [long]: entry(1) } });
    expect(Object.keys(readShares(a).doc.replicas)).toEqual([long]);
    const moved = { [`${ENTRY_PREFIX}other`]: a[entryKey(long)] };
    expect(() => readShares(moved)).toThrow(/whose key is not .*delete the Lease to reset the shares/);
  });

  it("reads the old single document as entries, marks it for a whole write, and its tombstone stops old replicas", () => {
    const old = JSON.stringify({ replicas: { a: entry(10), b: entry(20) } });
    const read = readShares({ [SHARES_ANNOTATION]: old, [entryKey("b")]: JSON.stringify({ id: "b", ...entry(7, 9) }) });
    expect(read.legacy).toBe(true);
    expect(read.doc.replicas.a).toEqual(entry(10));
    expect(read.doc.replicas.b).toEqual(entry(7, 9)); // the per-replica entry is the newer one
    const written = writeShares({ [SHARES_ANNOTATION]: old }, read.doc);
    expect(readShares(written).legacy).toBe(false);
    // the old version's parser is this one: it refuses the tombstone, so an old replica never writes over it
    expect(() => parseSharesDoc(written[SHARES_ANNOTATION])).toThrow(/has no replicas object/);
  });

  it("refuses a malformed entry with the fix", () => {
    expect(() => readShares({ [entryKey("a")]: "{" })).toThrow(/is not JSON.*delete the Lease/);
    expect(() => readShares({ [entryKey("a")]: JSON.stringify({ id: "a", share: 1 }) })).toThrow(/malformed entry/);
  });

  it("patches only its own entry, guarded by the value it read, and removes it on close", () => {
    const raw = JSON.stringify({ id: "a/b~c", ...entry(1) });
    const ops = ownEntryPatch("a/b~c", raw, entry(1, 2));
    const path = `/metadata/annotations/${entryKey("a/b~c").replace("/", "~1")}`;
    expect(ops).toEqual([
      { op: "test", path, value: raw },
      { op: "replace", path, value: JSON.stringify({ id: "a/b~c", ...entry(1, 2) }) },
    ]);
    expect(ownEntryPatch("me", raw, undefined)[1]).toEqual({
      op: "remove",
      path: "/metadata/annotations/shares.sbx.dev~1me",
    });
  });
});
