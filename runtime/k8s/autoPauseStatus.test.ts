import { describe, expect, it } from "vitest";
import { mergePatchBetween } from "./autoPauseStatus.ts";

describe("mergePatchBetween (RFC 7386 patch from one document to another)", () => {
  it.each([
    ["unchanged", { a: 1, b: { c: 2 } }, { a: 1, b: { c: 2 } }, undefined],
    ["changed leaf", { a: 1 }, { a: 2 }, { a: 2 }],
    ["removed key becomes null", { a: 1, b: 2 }, { a: 1 }, { b: null }],
    ["undefined value counts as removed", { a: 1, b: 2 }, { a: 1, b: undefined }, { b: null }],
    [
      "nested: only the changed keys",
      { p: { x: { ok: true, m: "busy" }, y: { ok: true } } },
      { p: { x: { ok: true, m: "idle" } } },
      { p: { x: { m: "idle" }, y: null } },
    ],
    ["added object", {}, { s: { t: "2026-01-01T00:00:00Z" } }, { s: { t: "2026-01-01T00:00:00Z" } }],
    ["arrays are replaced whole", { l: [1, 2] }, { l: [1] }, { l: [1] }],
    ["object removed entirely", { autoPause: { probes: {} } }, { autoPause: undefined }, { autoPause: null }],
  ])("%s", (_name, from, to, want) => {
    expect(mergePatchBetween(from, to)).toEqual(want);
  });
});
