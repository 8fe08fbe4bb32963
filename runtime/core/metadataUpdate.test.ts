import { describe, expect, it } from "vitest";
import { ValidationError } from "./errors.ts";
import { resolveMetadataUpdate } from "./metadataUpdate.ts";

const many = (n: number, prefix = "k") =>
  Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, "v"]));

describe("resolveMetadataUpdate", () => {
  it.each([
    [{ a: "1" }, { b: "2" }, { a: "1", b: "2" }],
    [{ a: "1" }, { a: "2" }, { a: "2" }],
    [{ a: "1", b: "2" }, { a: null }, { b: "2" }],
    [{ a: "1" }, { missing: null }, { a: "1" }],
    [{}, {}, {}],
    // removals count before the limit: a full map can swap keys in one patch
    [many(32), { k0: null, fresh: "x" }, { ...many(32), k0: undefined, fresh: "x" }],
  ])("%j + %j = %j", (current, patch, want) => {
    const got = resolveMetadataUpdate(current, patch);
    expect(got).toEqual(JSON.parse(JSON.stringify(want)));
    expect(current).not.toBe(got); // a copy: the caller's map is never changed
  });

  it.each([
    [null, "metadata", 'key: "value"'],
    [["a"], "metadata", 'key: "value"'],
    [{ "-a": "1" }, "metadata.-a", "1-63 letters"],
    [{ a: 1 }, "metadata.a", "a string"],
    [{ a: "x".repeat(257) }, "metadata.a", "at most 256"],
    [{ a: "x\0y" }, "metadata.a", "without NUL"],
    [many(33, "n"), "metadata", "at most 32 metadata entries"],
  ])("refuses %j: %s", (patch, field, fix) => {
    let err: unknown;
    try {
      resolveMetadataUpdate({}, patch);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toContain(field);
    expect((err as ValidationError).message).toContain(fix);
  });

  it("counts what is already there", () => {
    expect(() => resolveMetadataUpdate(many(31), { x: "1", y: "2" })).toThrow("at most 32 metadata entries");
  });
});
