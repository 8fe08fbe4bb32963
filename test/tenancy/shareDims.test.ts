// Team limits as dimensions of the shared budget (runtime/k8s/budget/sharePlan.ts): split exactly
// (the remainder one unit per replica), moved by per-dimension want and activity, parsed back from
// the Lease; and a property test over random rounds of three replicas: the parts of a team's
// limit plus what dead replicas' sandboxes hold never sum past the limit.
import { describe, expect, it } from "vitest";
import { decideShare, type ShareEntry, type ShareVec, sharesWithin } from "../../runtime/k8s/budget/sharePlan.ts";
import { parseSharesDoc } from "../../runtime/k8s/budget/sharesDoc.ts";

const D = "a/sandboxes";
const vec = (dims: Record<string, number>, base = 1000): ShareVec => ({ cpuMillis: base, memoryBytes: base, dims });
const entry = (dim: number, o: Partial<ShareEntry> = {}): ShareEntry => ({
  share: vec({ [D]: dim }, 0),
  used: vec({ [D]: 0 }, 0),
  want: false,
  beat: 1,
  ...o,
});
const budget = { cpuMillis: 0, memoryBytes: 0, dims: { [D]: 200 } };
const input = (me: string, replicas: Record<string, ShareEntry>, used = 0, extra = {}) => ({
  me,
  budget,
  doc: { replicas },
  orphans: { cpuMillis: 0, memoryBytes: 0 },
  used: vec({ [D]: used }, 0),
  headroom: vec({ [D]: 7 }, 0),
  ...extra,
});

describe("team dimensions in the share", () => {
  it("200 over three replicas is 67 + 67 + 66, not 3 x 66", () => {
    const parts = ["m0", "m1", "m2"].map((me) => {
      const others = Object.fromEntries(["m0", "m1", "m2"].filter((x) => x !== me).map((x) => [x, entry(0)]));
      return decideShare(input(me, others)).share.dims?.[D];
    });
    // each alone would take its fair part of what nobody holds; the parts hand out the remainder
    expect(parts).toEqual([67, 67, 66]);
  });

  it("a replica that needs more of a team's limit asks for that dimension only", () => {
    const d = decideShare(input("m0", { m0: entry(67), m1: entry(67), m2: entry(66) }, 67));
    expect(d.share.dims?.[D]).toBe(67);
    expect(d.wantDims).toEqual([D]);
    expect(d.want).toBe(false);
  });

  it("an idle replica gives a wanted dimension back down to its use plus headroom", () => {
    const d = decideShare(input("m1", { m0: entry(67, { wantDims: [D] }), m1: entry(67), m2: entry(66) }, 10));
    expect(d.share.dims?.[D]).toBe(17);
  });

  it("a replica admitting into the dimension keeps its fair part while another wants", () => {
    const d = decideShare(
      input("m1", { m0: entry(67, { wantDims: [D] }), m1: entry(67), m2: entry(66) }, 10, { activeDims: new Set([D]) }),
    );
    expect(d.share.dims?.[D]).toBe(67);
  });

  it("grows a wanted dimension to its use plus headroom, only out of the room nobody holds", () => {
    expect(decideShare(input("m0", { m0: entry(67), m1: entry(17), m2: entry(66) }, 67)).share.dims?.[D]).toBe(74);
    // the others hold 130 of 200 and it holds 67: 3 are free
    expect(decideShare(input("m0", { m0: entry(67), m1: entry(64), m2: entry(66) }, 67)).share.dims?.[D]).toBe(70);
  });

  it("round-trips through the Lease's entry format, and refuses a malformed dimension", () => {
    const doc = { replicas: { m0: entry(67, { wantDims: [D] }) } };
    expect(parseSharesDoc(JSON.stringify(doc))).toEqual(doc);
    const bad = { replicas: { m0: { ...entry(1), share: { cpuMillis: 0, memoryBytes: 0, dims: { [D]: "x" } } } } };
    expect(() => parseSharesDoc(JSON.stringify(bad))).toThrow(/malformed entry/);
  });
});

/** Small deterministic PRNG so a failing seed can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("property: the parts of a team limit never sum past it", () => {
  it.each(Array.from({ length: 20 }, (_, i) => i + 1))("seed %i: 300 rounds of three replicas", (seed) => {
    const r = rng(seed);
    const ids = ["m0", "m1", "m2"];
    const dims = { "a/sandboxes": 50, "a/cpu": 5000, "b/sandboxes": 17 };
    const b: ShareVec = { cpuMillis: 10_000, memoryBytes: 10_000, dims };
    const replicas: Record<string, ShareEntry> = {};
    const used: Record<string, ShareVec> = {};
    for (const id of ids) used[id] = { cpuMillis: 0, memoryBytes: 0, dims: {} };
    const last: Record<string, ShareVec> = {};
    for (let round = 0; round < 300; round++) {
      const me = ids[Math.floor(r() * ids.length)];
      // admit or release within the share it holds now (what admission does between rounds)
      const share = replicas[me]?.share;
      const u = used[me];
      for (const k of Object.keys(dims)) {
        const cap = share?.dims?.[k] ?? 0;
        const cur = u.dims?.[k] ?? 0;
        u.dims![k] = r() < 0.6 ? Math.min(cap, cur + Math.floor(r() * 10)) : Math.max(0, cur - Math.floor(r() * 10));
      }
      const activeDims = new Set(Object.keys(dims).filter((k) => (u.dims?.[k] ?? 0) > (last[me]?.dims?.[k] ?? 0)));
      last[me] = { ...u, dims: { ...u.dims } };
      const d = decideShare({
        me,
        budget: b,
        doc: { replicas: structuredClone(replicas) },
        orphans: { cpuMillis: 0, memoryBytes: 0 },
        used: u,
        headroom: { cpuMillis: 100, memoryBytes: 100, dims: { "a/sandboxes": 2, "a/cpu": 200, "b/sandboxes": 1 } },
        activeDims,
      });
      replicas[me] = {
        share: d.share,
        used: u,
        want: d.want,
        beat: round,
        ...(d.wantDims ? { wantDims: d.wantDims } : {}),
      };
      expect(
        sharesWithin({ replicas }, { cpuMillis: 0, memoryBytes: 0, dims: {} }, b),
        `seed ${seed} round ${round}`,
      ).toBe(true);
      for (const k of Object.keys(dims)) expect(d.share.dims![k]).toBeGreaterThanOrEqual(u.dims![k]);
    }
  });
});
