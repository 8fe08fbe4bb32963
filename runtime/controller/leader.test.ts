import { describe, expect, it } from "vitest";
import { decideLease } from "./leader.ts";

describe("decideLease", () => {
  const lease = { holder: "a", version: "7", leaseDurationMs: 15_000 };
  it.each([
    ["no lease yet", undefined, 0, 0, "b", "acquire"],
    ["released lease", { ...lease, holder: "" }, 0, 0, "b", "acquire"],
    ["our own lease", lease, 0, 100_000, "a", "renew"],
    ["another holder, fresh", lease, 1_000, 15_999, "b", "wait"],
    ["another holder, unchanged for a full lease duration", lease, 1_000, 16_000, "b", "acquire"],
  ] as const)("%s -> %s", (_n, l, observedAt, now, me, want) => {
    expect(decideLease(l, observedAt, now, me)).toBe(want);
  });
});
