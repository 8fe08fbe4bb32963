import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { silentLogger } from "../core/log.ts";
import { ActivityRecorder } from "./activity.ts";

describe("ActivityRecorder", () => {
  it("coalesces a storm of touches into one write per sandbox per interval, with the newest time", async () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const writes: [string, string][] = [];
    const rec = new ActivityRecorder({
      clock,
      logger: silentLogger(),
      intervalMs: 5000,
      isNotFound: () => false,
      write: async (id, at) => void writes.push([id, at.toISOString()]),
    });
    rec.start();
    for (let i = 0; i < 500; i++) rec.record("a", new Date(Date.UTC(2026, 0, 1, 0, 0, 0, i)));
    rec.record("b", new Date(Date.UTC(2026, 0, 1, 0, 0, 1)));
    expect(rec.latest("a")?.toISOString()).toBe("2026-01-01T00:00:00.499Z");
    await clock.advance(4999);
    expect(writes).toEqual([]);
    await clock.advance(1);
    expect(writes.sort()).toEqual([
      ["a", "2026-01-01T00:00:00.499Z"],
      ["b", "2026-01-01T00:00:01.000Z"],
    ]);
    await clock.advance(5000);
    expect(writes).toHaveLength(2);
    await rec.close();
  });

  it("retries a failed write next round and drops a sandbox that is gone", async () => {
    const clock = new ManualClock();
    let attempts = 0;
    const rec = new ActivityRecorder({
      clock,
      logger: silentLogger(),
      intervalMs: 1000,
      isNotFound: (e) => (e as Error).message === "404",
      write: async (id) => {
        attempts++;
        if (id === "gone") throw new Error("404");
        if (attempts <= 2) throw new Error("503");
      },
    });
    rec.record("x", new Date());
    rec.record("gone", new Date());
    await rec.flush();
    expect(rec.latest("x")).toBeDefined();
    expect(rec.latest("gone")).toBeUndefined();
    await rec.flush();
    expect(rec.latest("x")).toBeUndefined();
  });
});

describe("ActivityRecorder's flush", () => {
  it("keeps at most `concurrency` writes in flight, and still writes every sandbox", async () => {
    let inFlight = 0;
    let most = 0;
    const written: string[] = [];
    const gates: (() => void)[] = [];
    const rec = new ActivityRecorder({
      clock: new ManualClock(),
      logger: silentLogger(),
      intervalMs: 1000,
      concurrency: 3,
      isNotFound: () => false,
      write: async (id) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise<void>((r) => gates.push(r));
        inFlight--;
        written.push(id);
      },
    });
    for (let i = 0; i < 20; i++) rec.record(`s${i}`, new Date());
    const flushed = rec.flush();
    // release the writes one at a time, as the API server answers them
    while (written.length < 20) {
      await new Promise((r) => setImmediate(r));
      gates.shift()?.();
    }
    await flushed;
    expect(most).toBe(3);
    expect(written.sort()).toEqual(Array.from({ length: 20 }, (_, i) => `s${i}`).sort());
  });
});
