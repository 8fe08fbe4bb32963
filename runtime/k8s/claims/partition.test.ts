import { describe, expect, it } from "vitest";
import { ClaimPartition, decideOwner, hash32 } from "./partition.ts";

const pods = Array.from({ length: 600 }, (_, i) => `sbx-warm-base-nano-${i.toString(36)}x`);

describe("decideOwner (rendezvous hash)", () => {
  it.each([
    [[], undefined],
    [["a"], "a"],
  ])("with members %j the owner is %j", (members, owner) => {
    expect(decideOwner("pod-1", members)).toBe(owner);
  });

  it("does not depend on the members' order, and spreads pods evenly", () => {
    const counts = new Map<string, number>();
    for (const p of pods) {
      const o = decideOwner(p, ["r1", "r2", "r3"])!;
      expect(decideOwner(p, ["r3", "r1", "r2"])).toBe(o);
      counts.set(o, (counts.get(o) ?? 0) + 1);
    }
    for (const r of ["r1", "r2", "r3"]) expect(counts.get(r)).toBeGreaterThan(150); // 200 expected each
  });

  it("moves only the pods a leaving replica owned", () => {
    for (const p of pods) {
      const before = decideOwner(p, ["r1", "r2", "r3"]);
      if (before !== "r3") expect(decideOwner(p, ["r1", "r2"])).toBe(before);
    }
  });

  it("hash32 is a stable 32-bit value", () => {
    expect(hash32("abc")).toBe(hash32("abc"));
    expect(hash32("abc")).not.toBe(hash32("abd"));
    expect(hash32("abc")).toBeLessThan(2 ** 32);
  });
});

describe("ClaimPartition", () => {
  it("a fresh replica owns nothing for one phase, then its part", () => {
    const p = new ClaimPartition({ self: "r1", phaseMs: 1000 });
    expect(pods.some((x) => p.owns(x, 0))).toBe(false);
    p.observe(["r1", "r2"], 0);
    expect(pods.some((x) => p.owns(x, 999))).toBe(false);
    const mine = pods.filter((x) => p.owns(x, 1000));
    expect(mine).toEqual(pods.filter((x) => decideOwner(x, ["r1", "r2"]) === "r1"));
  });

  it("owns nothing while the document does not list it (the others do not count it either)", () => {
    const p = new ClaimPartition({ self: "r1", phaseMs: 10 });
    p.observe(["r2"], 0);
    expect(pods.some((x) => p.owns(x, 10))).toBe(false);
    p.observe(["r1"], 10);
    expect(pods.every((x) => p.owns(x, 20))).toBe(true);
  });

  it("ignores retired or re-read lists that did not change", () => {
    const p = new ClaimPartition({ self: "r1", phaseMs: 10 });
    p.observe(["r2", "r1"], 0);
    p.observe(["r1", "r2"], 5); // same set: the phase is not restarted
    expect(p.snapshot(10)).toEqual({ members: ["r1", "r2"] });
  });

  // Property: replicas that see each change up to `lag` ms apart (lag < phase) never both own a
  // pod at the same instant, through joins and leaves.
  it.each([0, 150, 499])("no pod is owned by two replicas while they see changes %i ms apart", (lag) => {
    const phaseMs = 500;
    const ids = ["r1", "r2", "r3"];
    const parts = new Map(ids.map((id) => [id, new ClaimPartition({ self: id, phaseMs })]));
    // [when, live replicas in the document]
    const changes: [number, string[]][] = [
      [0, ["r1", "r2"]],
      [2000, ["r1", "r2", "r3"]],
      [4000, ["r1", "r3"]],
      [4100, ["r1", "r2", "r3"]],
      [7000, ["r2", "r3"]],
    ];
    const delay = new Map(ids.map((id, i) => [id, (lag * i) / (ids.length - 1)]));
    for (let t = 0; t <= 9000; t += 10) {
      for (const id of ids) {
        const seen = [...changes].reverse().find(([at]) => at + delay.get(id)! <= t);
        if (seen) parts.get(id)!.observe(seen[1], t);
      }
      for (const pod of pods.slice(0, 120)) {
        const owners = ids.filter((id) => parts.get(id)!.owns(pod, t));
        expect(owners.length, `${pod} at ${t} ms`).toBeLessThanOrEqual(1);
      }
    }
  });
});
