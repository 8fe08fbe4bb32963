import { describe, expect, it } from "vitest";
import { Admission } from "./admission.ts";
import { CapacityError } from "./errors.ts";
import type { Sandbox } from "./types.ts";

const Mi = 2 ** 20;
const nano = { name: "nano", cpuRequestMillis: 100, memoryRequestBytes: 128 * Mi };
const big = { name: "big", cpuRequestMillis: 1500, memoryRequestBytes: 1024 * Mi };

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

function live(id: string, phase: Sandbox["phase"], cpu = 100, mem = 128 * Mi): Sandbox {
  return {
    id,
    owner: "o",
    profile: "base",
    size: "nano",
    phase,
    ready: phase === "Running",
    createdAt: "",
    expiresAt: "",
    metadata: {},
    cpuRequestMillis: cpu,
    memoryRequestBytes: mem,
  };
}

describe("Admission", () => {
  it.each([
    {
      what: "cpu short",
      budget: { cpuMillis: 150, memoryBytes: 1024 * Mi },
      first: nano,
      second: nano,
      short: "short on cpu (requested 100m, free 50m of 150m)",
    },
    {
      what: "memory short",
      budget: { cpuMillis: 4000, memoryBytes: 200 * Mi },
      first: nano,
      second: nano,
      short: "short on memory (requested 128Mi, free 72Mi of 200Mi)",
    },
    {
      what: "both short",
      budget: { cpuMillis: 1000, memoryBytes: 1024 * Mi },
      first: nano,
      second: big,
      short: "short on cpu (requested 1500m, free 900m of 1) and memory",
    },
  ])("rejects with a reason naming what is short: $what", ({ budget, first, second, short }) => {
    const a = new Admission(budget, { retryAfterSeconds: 7 });
    a.admit({ id: "a", size: first });
    let err: unknown;
    try {
      a.admit({ id: "b", size: second });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).message).toContain(short);
    expect((err as CapacityError).retryAfterSeconds).toBe(7);
    expect(a.usage().reservations).toBe(1);
  });

  it("admitting the same id twice reserves once; release is idempotent", () => {
    const a = new Admission({ cpuMillis: 1000, memoryBytes: 1024 * Mi });
    a.admit({ id: "x", size: nano });
    a.admit({ id: "x", size: nano });
    expect(a.usage().used).toEqual({ cpuMillis: 100, memoryBytes: 128 * Mi });
    expect(a.release("x")).toBe(true);
    expect(a.release("x")).toBe(false);
    expect(a.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });

  it("rebuild adopts live sandboxes, ignores terminal and paused ones, keeps in-flight creates", () => {
    const a = new Admission({ cpuMillis: 1000, memoryBytes: 4096 * Mi });
    a.admit({ id: "inflight", size: nano });
    a.admit({ id: "gone", size: nano });
    const r = a.rebuild(
      [
        live("r1", "Running"),
        live("p1", "Pending"),
        live("f1", "Failed"),
        live("s1", "Succeeded"),
        live("z1", "Paused"),
      ],
      new Set(["inflight"]),
    );
    expect(r.adopted.sort()).toEqual(["p1", "r1"]);
    expect(r.released).toEqual(["gone"]);
    expect(a.ids().sort()).toEqual(["inflight", "p1", "r1"]);
    expect(a.usage().used.cpuMillis).toBe(300);
  });

  it("rebuild never drops a reservation made after the listing was taken", () => {
    const a = new Admission({ cpuMillis: 1000, memoryBytes: 4096 * Mi });
    a.admit({ id: "old", size: nano });
    const mark = a.mark();
    a.admit({ id: "new", size: nano }); // created while the listing was in flight
    const r = a.rebuild([], new Set(), mark);
    expect(r.released).toEqual(["old"]);
    expect(a.ids()).toEqual(["new"]);
  });

  it("adopting over budget shows usage over budget and rejects new creates", () => {
    const a = new Admission({ cpuMillis: 150, memoryBytes: 4096 * Mi });
    a.rebuild([live("r1", "Running"), live("r2", "Running")]);
    expect(a.usage().free.cpuMillis).toBe(-50);
    expect(() => a.admit({ id: "n", size: nano })).toThrow(/short on cpu/);
  });

  // Property: whatever the interleaving of concurrent admits and releases (each client awaits
  // a random number of timer ticks between steps), used never exceeds the budget and always
  // equals the sum of held reservations; once everyone is done, usage is zero.
  it.each([1, 2, 3, 4, 5, 6, 7, 8])("never over budget under random interleavings (seed %i)", async (seed) => {
    const r = rng(seed);
    const budget = { cpuMillis: 1000 + Math.floor(r() * 3000), memoryBytes: (512 + Math.floor(r() * 4096)) * Mi };
    const a = new Admission(budget);
    const held = new Map<string, { cpu: number; mem: number }>();
    let admitted = 0;
    let rejected = 0;
    const check = () => {
      const u = a.usage();
      expect(u.used.cpuMillis).toBeLessThanOrEqual(budget.cpuMillis);
      expect(u.used.memoryBytes).toBeLessThanOrEqual(budget.memoryBytes);
      let cpu = 0;
      let mem = 0;
      for (const h of held.values()) {
        cpu += h.cpu;
        mem += h.mem;
      }
      expect(u.used).toEqual({ cpuMillis: cpu, memoryBytes: mem });
    };
    const tick = () => new Promise<void>((res) => (r() < 0.5 ? setImmediate(res) : queueMicrotask(res)));
    const client = async (c: number) => {
      for (let i = 0; i < 20; i++) {
        const id = `c${c}-${i}`;
        const size = {
          name: "s",
          cpuRequestMillis: 50 + Math.floor(r() * 700),
          memoryRequestBytes: (64 + Math.floor(r() * 900)) * Mi,
        };
        for (let k = Math.floor(r() * 3); k > 0; k--) await tick();
        try {
          a.admit({ id, size });
          held.set(id, { cpu: size.cpuRequestMillis, mem: size.memoryRequestBytes });
          admitted++;
        } catch (e) {
          expect(e).toBeInstanceOf(CapacityError);
          rejected++;
        }
        check();
        for (let k = Math.floor(r() * 4); k > 0; k--) await tick();
        if (r() < 0.8) {
          a.release(id);
          if (r() < 0.3) a.release(id); // double release from a racing terminal path
          held.delete(id);
          check();
        }
      }
    };
    await Promise.all(Array.from({ length: 30 }, (_, c) => client(c)));
    expect(admitted).toBeGreaterThan(0);
    expect(rejected).toBeGreaterThan(0);
    for (const id of [...held.keys()]) {
      a.release(id);
      held.delete(id);
    }
    check();
    expect(a.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });
});
