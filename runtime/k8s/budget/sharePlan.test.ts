import { describe, expect, it } from "vitest";
import { Liveness, shouldAdmit } from "./liveness.ts";
import {
  decideShare,
  planHeadroom,
  retireSilent,
  type ShareEntry,
  type SharesDoc,
  type ShareVec,
  sharesWithin,
} from "./sharePlan.ts";
import { parseSharesDoc } from "./sharesDoc.ts";

const v = (cpuMillis: number, memoryBytes = cpuMillis): ShareVec => ({ cpuMillis, memoryBytes });
const entry = (share: number, want = false, used = 0, beat = 1) => ({ share: v(share), used: v(used), want, beat });
const BUDGET = v(1000);
const HEAD = v(30);
const ZERO = v(0);

describe("decideShare", () => {
  it.each([
    { what: "alone takes the whole budget", doc: {}, used: 0, share: 1000, want: false },
    {
      what: "joins at zero while the others hold everything, and asks",
      doc: { a: entry(500), b: entry(500) },
      used: 0,
      share: 0,
      want: true,
    },
    {
      what: "grows to its fair part out of free room",
      doc: { a: entry(333), b: entry(333) },
      used: 0,
      share: 333,
      want: false,
    },
    {
      what: "gives back above need while another wants",
      doc: { me: entry(500), a: entry(300, true, 300) },
      used: 100,
      share: 130,
      want: false,
    },
    {
      what: "busy while another wants: shrinks to fair, never below used",
      doc: { me: entry(700), a: entry(300, true, 300) },
      used: 600,
      share: 600,
      want: true,
    },
    {
      what: "admitting while another wants: keeps its fair part",
      doc: { me: entry(500), a: entry(500, true, 500) },
      used: 100,
      active: true,
      share: 500,
      want: false,
    },
    { what: "idle at rest returns to fair", doc: { me: entry(900), a: entry(100) }, used: 0, share: 500, want: false },
    {
      what: "busy at rest keeps used + headroom",
      doc: { me: entry(900), a: entry(100) },
      used: 800,
      share: 830,
      want: false,
    },
  ])("$what", ({ doc, used, share, want, active }) => {
    const replicas = doc as Record<string, ShareEntry>;
    const d = decideShare({
      me: "me",
      budget: BUDGET,
      doc: { replicas },
      orphans: ZERO,
      used: v(used),
      headroom: HEAD,
      active,
    });
    expect(d).toEqual({ share: v(share), want });
  });

  it("counts orphans off the top and gives back when they exceed the free room", () => {
    // a dead replica's 400 live sandboxes now count as orphans; we hold 700 with 650 used
    const d = decideShare({
      me: "me",
      budget: BUDGET,
      doc: { replicas: { me: entry(700), a: entry(300) } },
      orphans: v(400),
      used: v(650),
      headroom: HEAD,
    });
    expect(d.share.cpuMillis).toBe(650); // all it can give back: never below what it admitted
  });

  it("sizes CPU and memory independently", () => {
    const d = decideShare({
      me: "me",
      budget: { cpuMillis: 1000, memoryBytes: 4000 },
      doc: { replicas: { a: { share: { cpuMillis: 1000, memoryBytes: 0 }, used: ZERO, want: false, beat: 1 } } },
      orphans: ZERO,
      used: ZERO,
      headroom: v(10),
    });
    expect(d.share).toEqual({ cpuMillis: 0, memoryBytes: 2000 });
    expect(d.want).toBe(true);
  });

  it("headroom: a fraction of the fair part", () => {
    expect(planHeadroom(v(1000), 4, 0.1)).toEqual(v(25));
    expect(planHeadroom(v(1000), 2, 0.1)).toEqual(v(50));
    expect(planHeadroom(v(0), 2, 0.1)).toEqual(v(1));
  });
});

/** A round-robin simulation of N replicas sharing one document (the CAS serialises writes). */
function simulate(
  n: number,
  demand: (replica: number, step: number) => number,
  steps: number,
  onStep: (doc: SharesDoc, admitted: number[]) => void,
): { doc: SharesDoc; admitted: number[] } {
  const doc: SharesDoc = { replicas: {} };
  const admitted = Array.from({ length: n }, () => 0);
  for (let step = 0; step < steps; step++) {
    for (let r = 0; r < n; r++) {
      const me = `r${r}`;
      // admission, synchronously, against the share last written
      const share = doc.replicas[me]?.share.cpuMillis ?? 0;
      admitted[r] = Math.min(demand(r, step), Math.max(admitted[r], share));
      if (demand(r, step) < admitted[r]) admitted[r] = demand(r, step); // sandboxes end
      const d = decideShare({ me, budget: BUDGET, doc, orphans: ZERO, used: v(admitted[r]), headroom: HEAD });
      doc.replicas[me] = { share: d.share, used: v(admitted[r]), want: d.want, beat: step };
      onStep(doc, admitted);
    }
  }
  return { doc, admitted };
}

describe("shares across replicas (simulated rounds)", () => {
  it("never sum past the budget, and move to the one replica with demand", () => {
    let checks = 0;
    const { admitted } = simulate(
      3,
      (r) => (r === 0 ? 2000 : 0),
      30,
      (doc, adm) => {
        checks++;
        expect(sharesWithin(doc, ZERO, BUDGET)).toBe(true);
        expect(adm.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(1000);
      },
    );
    expect(checks).toBe(90);
    // the two idle replicas keep only their headroom: nothing is stranded beyond that
    expect(admitted[0]).toBeGreaterThanOrEqual(1000 - 2 * HEAD.cpuMillis);
  });

  it("split evenly when every replica is saturated, and return to fair at rest", () => {
    const busy = simulate(
      3,
      () => 2000,
      30,
      (doc) => expect(sharesWithin(doc, ZERO, BUDGET)).toBe(true),
    );
    expect(busy.admitted.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(990);
    const rest = simulate(
      3,
      () => 0,
      30,
      () => {},
    );
    for (const e of Object.values(rest.doc.replicas)) expect(e.share.cpuMillis).toBe(333);
  });
});

describe("a silent replica: retired for a phase, then removed", () => {
  it("keeps the retired share held (no fair part, no want), frees it only on removal", () => {
    const doc: SharesDoc = { replicas: { me: entry(334), a: entry(333), dead: entry(333, true, 300, 7) } };
    expect(retireSilent(doc, ["dead"])).toEqual({ retired: ["dead"], removed: [] });
    expect(doc.replicas.dead).toEqual({ ...entry(333, false, 300, 8), retired: true });
    // still held: nothing to grow into, and the fair part is over the two live replicas
    const held = decideShare({ me: "me", budget: BUDGET, doc, orphans: ZERO, used: v(333), headroom: HEAD });
    expect(held).toEqual({ share: v(334), want: true });
    // a retired entry takes no fair part: the two live replicas split what is not held
    const split: SharesDoc = { replicas: { me: entry(200), a: entry(200), dead: { ...entry(300), retired: true } } };
    expect(
      decideShare({ me: "me", budget: BUDGET, doc: split, orphans: ZERO, used: ZERO, headroom: HEAD }).share,
    ).toEqual(v(500));
    expect(retireSilent(doc, ["dead"])).toEqual({ retired: [], removed: ["dead"] });
    // removed: its 300 live sandboxes are orphans now; the rest of its share is free
    const freed = decideShare({ me: "me", budget: BUDGET, doc, orphans: v(300), used: v(333), headroom: HEAD });
    expect(freed).toEqual({ share: v(363), want: false }); // used + headroom, out of the freed room
    expect(sharesWithin({ replicas: { ...doc.replicas, me: { ...entry(363) } } }, v(300), BUDGET)).toBe(true);
  });
});

describe("liveness by the observer's own clock", () => {
  it("expires a replica whose beat stands still for a lease, whatever the writer's clock says", () => {
    const l = new Liveness();
    const doc = (beatA: number, beatB: number): SharesDoc => ({
      replicas: { a: entry(1, false, 0, beatA), b: entry(1, false, 0, beatB) },
    });
    l.observe(doc(1, 1), 0);
    l.observe(doc(2, 1), 2_000);
    expect(l.expired(2_999, 3_000, "me")).toEqual([]);
    expect(l.expired(3_000, 3_000, "me")).toEqual(["b"]);
    l.observe(doc(3, 2), 3_100); // b beats again before anyone removed it
    expect(l.expired(5_000, 3_000, "me")).toEqual([]);
    expect(l.expired(6_100, 3_000, "b")).toEqual(["a"]);
  });

  it("a first sighting counts as fresh: a replica found at start gets a whole lease", () => {
    const l = new Liveness();
    l.observe({ replicas: { a: entry(1, false, 0, 99) } }, 50_000);
    expect(l.expired(52_999, 3_000, "me")).toEqual([]);
  });

  it("a writer fences itself before any observer can expire it", () => {
    const lease = 4_000;
    const margin = 1_000;
    const sentAt = 10_000; // the write the observer saw no earlier than this
    expect(shouldAdmit(sentAt, sentAt + lease - margin - 1, lease, margin)).toBe(true);
    expect(shouldAdmit(sentAt, sentAt + lease - margin, lease, margin)).toBe(false);
    expect(shouldAdmit(undefined, 0, lease, margin)).toBe(false);
    const l = new Liveness();
    l.observe({ replicas: { w: entry(1, false, 0, 7) } }, sentAt + 5);
    expect(l.expired(sentAt + lease - margin, lease, "me")).toEqual([]); // writer already fenced, observer still waits
  });
});

describe("the shares document", () => {
  it.each([
    ["not JSON", "{", /is not JSON/],
    ["no replicas", "{}", /has no replicas object/],
    ["a malformed entry", '{"replicas":{"a":{"share":1}}}', /replica a has a malformed entry/],
  ])("refuses %s, naming the fix", (_what, raw, msg) => {
    expect(() => parseSharesDoc(raw)).toThrow(msg);
    expect(() => parseSharesDoc(raw)).toThrow(/delete the Lease to reset the shares/);
  });
  it("reads an absent annotation as no shares", () => {
    expect(parseSharesDoc(undefined)).toEqual({ replicas: {} });
  });
});
