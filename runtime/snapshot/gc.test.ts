// The push gate and the collection schedule, driven step by step (a manual clock, deferred
// pushes and collections): the ordering rules that keep a garbage collection from sweeping the
// blobs of a push in flight. The real registry side is test/snapshot/registry-gc.test.ts.
import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { silentLogger } from "../core/log.ts";
import { type CollectionReport, PushGate, SnapshotGc } from "./gc.ts";

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("PushGate", () => {
  it("a collection waits for pushes in flight, and pushes that come while it waits or runs wait for it", async () => {
    const gate = new PushGate();
    const log: string[] = [];
    const first = deferred();
    const p1 = gate.push(async () => {
      await first.promise;
      log.push("push 1 done");
    });
    const collecting = deferred();
    const c = gate.exclusive(async () => {
      log.push("collection started");
      await collecting.promise;
      log.push("collection done");
    });
    const p2 = gate.push(async () => log.push("push 2"));
    await settle();
    expect(log).toEqual([]);
    expect(gate.inFlight).toBe(1);
    first.resolve();
    await settle();
    expect(log).toEqual(["push 1 done", "collection started"]);
    collecting.resolve();
    await Promise.all([p1, c, p2]);
    expect(log).toEqual(["push 1 done", "collection started", "collection done", "push 2"]);
  });

  it("pushes share the gate and a failing one releases it", async () => {
    const gate = new PushGate();
    const a = deferred();
    const pa = gate.push(() => a.promise);
    const pb = gate.push(async () => "b");
    expect(await pb).toBe("b");
    a.reject(new Error("upload failed"));
    await expect(pa).rejects.toThrow("upload failed");
    expect(gate.inFlight).toBe(0);
    await expect(gate.exclusive(async () => "ran")).resolves.toBe("ran");
  });
});

describe("SnapshotGc", () => {
  function setup(delayMs = 1000) {
    const clock = new ManualClock();
    const runs: Array<ReturnType<typeof deferred<CollectionReport>>> = [];
    const gc = new SnapshotGc({
      clock,
      delayMs,
      logger: silentLogger(),
      collect: () => {
        const d = deferred<CollectionReport>();
        runs.push(d);
        return d.promise;
      },
    });
    return { clock, runs, gc };
  }
  const report = { reclaimedBytes: 1 };

  it("a burst of deletes costs one collection, after the delay", async () => {
    const { clock, runs, gc } = setup();
    gc.collectSoon();
    gc.collectSoon();
    await clock.advance(999);
    expect(runs).toHaveLength(0);
    gc.collectSoon();
    await clock.advance(1);
    await settle();
    expect(runs).toHaveLength(1);
    runs[0].resolve(report);
    await gc.idle();
    expect(runs).toHaveLength(1);
  });

  it("garbage that arrives during a collection gets one more collection; requests meanwhile share it", async () => {
    const { runs, gc } = setup();
    const first = gc.collectNow();
    await settle();
    const second = gc.collectNow();
    const third = gc.collectNow();
    expect(second).toBe(third);
    expect(runs).toHaveLength(1);
    runs[0].resolve(report);
    await first;
    await settle();
    expect(runs).toHaveLength(2);
    runs[1].resolve({ reclaimedBytes: 2 });
    await expect(second).resolves.toEqual({ reclaimedBytes: 2 });
  });

  it("a failed push schedules a collection (its committed blobs have no manifest)", async () => {
    const { clock, runs, gc } = setup(10);
    await expect(gc.whilePushing(async () => Promise.reject(new Error("layer push failed")))).rejects.toThrow(
      "layer push failed",
    );
    await clock.advance(10);
    await settle();
    expect(runs).toHaveLength(1);
    runs[0].resolve(report);
    await gc.idle();
  });

  it("a failed collection is reported to its caller and does not stop later ones", async () => {
    const { runs, gc } = setup();
    const failed = gc.collectNow();
    await settle();
    runs[0].reject(new Error("garbage-collect exited 1"));
    await expect(failed).rejects.toThrow("garbage-collect exited 1");
    const next = gc.collectNow();
    await settle();
    runs[1].resolve(report);
    await expect(next).resolves.toEqual(report);
  });

  it("close cancels a scheduled collection and waits for a running one", async () => {
    const { clock, runs, gc } = setup();
    const running = gc.collectNow();
    await settle();
    gc.collectSoon();
    const closed = gc.close();
    runs[0].resolve(report);
    await Promise.all([running, closed]);
    await clock.advance(5000);
    expect(runs).toHaveLength(1);
  });
});
