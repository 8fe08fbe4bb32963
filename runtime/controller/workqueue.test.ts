import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { silentLogger } from "../core/log.ts";
import { backoffDelay, WorkQueue } from "./workqueue.ts";

const tick = () => new Promise((r) => setImmediate(r));

describe("backoffDelay", () => {
  it.each([
    [0, 0],
    [1, 100],
    [2, 200],
    [5, 1600],
    [20, 5000],
  ])("after %s failures waits %s ms", (f, ms) => expect(backoffDelay(f, 100, 5000)).toBe(ms));
});

describe("WorkQueue", () => {
  it("deduplicates a key that is waiting", async () => {
    const seen: string[] = [];
    const q = new WorkQueue(async (k) => void seen.push(k), {
      clock: new ManualClock(),
      logger: silentLogger(),
      concurrency: 1,
    });
    q.add("a");
    q.add("b");
    q.add("b");
    q.add("b");
    await q.idle();
    expect(seen).toEqual(["a", "b"]);
  });

  it("never runs one key twice at once, and reruns it if it changed meanwhile", async () => {
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    let release!: () => void;
    const q = new WorkQueue(
      async () => {
        running++;
        runs++;
        maxRunning = Math.max(maxRunning, running);
        if (runs === 1) await new Promise<void>((r) => (release = r));
        running--;
      },
      { clock: new ManualClock(), logger: silentLogger(), concurrency: 4 },
    );
    q.add("k");
    await tick();
    q.add("k");
    q.add("k");
    await tick();
    expect(runs).toBe(1);
    release();
    await q.idle();
    await tick();
    await q.idle();
    expect(runs).toBe(2);
    expect(maxRunning).toBe(1);
  });

  it("backs off exponentially per key on the injected clock", async () => {
    const clock = new ManualClock();
    let calls = 0;
    const q = new WorkQueue(
      async () => {
        calls++;
        if (calls < 4) throw new Error("boom");
      },
      { clock, logger: silentLogger(), concurrency: 1, baseBackoffMs: 100, maxBackoffMs: 10_000 },
    );
    q.add("k");
    await q.idle();
    expect(calls).toBe(1);
    await clock.advance(99);
    expect(calls).toBe(1);
    await clock.advance(1);
    await q.idle();
    expect(calls).toBe(2);
    expect(q.failureCount("k")).toBe(2);
    await clock.advance(199);
    expect(calls).toBe(2);
    await clock.advance(1);
    await q.idle();
    expect(calls).toBe(3);
    await clock.advance(400);
    await q.idle();
    expect(calls).toBe(4);
    expect(q.failureCount("k")).toBe(0);
  });

  it("honours requeueAfterMs from the reconciler", async () => {
    const clock = new ManualClock();
    let calls = 0;
    const q = new WorkQueue(async () => (++calls === 1 ? { requeueAfterMs: 5000 } : undefined), {
      clock,
      logger: silentLogger(),
      concurrency: 1,
    });
    q.add("k");
    await q.idle();
    await clock.advance(4999);
    expect(calls).toBe(1);
    await clock.advance(1);
    await q.idle();
    expect(calls).toBe(2);
  });
});
