import { describe, expect, it } from "vitest";
import { VerifiedTokens } from "./verifiedTokens.ts";

describe("VerifiedTokens", () => {
  it.each([
    ["the same token against the same hashes", "sb1", "tok", "h1:", true],
    ["another token", "sb1", "tok2", "h1:", false],
    ["a token of the same length that differs", "sb1", "tak", "h1:", false],
    ["the same token once the stored hashes changed (connect minted another)", "sb1", "tok", "h1:h2", false],
    ["the same token for another sandbox", "sb2", "tok", "h1:", false],
  ])("%s: %s", (_what, id, presented, stored, known) => {
    const v = new VerifiedTokens();
    v.remember("sb1", "tok", "h1:");
    expect(v.known(id, presented, stored)).toBe(known);
  });

  it("forgets a sandbox, and keeps at most `max` entries (the oldest goes)", () => {
    const v = new VerifiedTokens(2);
    v.remember("a", "ta", "h");
    v.remember("b", "tb", "h");
    v.remember("a", "ta", "h"); // used again: now the newest
    v.remember("c", "tc", "h");
    expect(v.size).toBe(2);
    expect([v.known("a", "ta", "h"), v.known("b", "tb", "h"), v.known("c", "tc", "h")]).toEqual([true, false, true]);
    v.forget("a");
    expect(v.known("a", "ta", "h")).toBe(false);
  });
});
