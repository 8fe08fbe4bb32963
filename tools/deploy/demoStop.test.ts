import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { listenForStop, StopSequence, type StopStep } from "./demoStop.ts";

/** A clock and sleeps the test moves by hand: bounds are checked without waiting for them. */
function fakeTime() {
  let now = 0;
  const sleepers: { at: number; wake: () => void }[] = [];
  return {
    now: () => now,
    sleep: (ms: number) => new Promise<void>((wake) => sleepers.push({ at: now + ms, wake })),
    advance(ms: number) {
      now += ms;
      for (const s of sleepers.filter((x) => x.at <= now)) {
        sleepers.splice(sleepers.indexOf(s), 1);
        s.wake();
      }
    },
  };
}

const flush = () => new Promise((r) => setImmediate(r));

function recorder() {
  const order: string[] = [];
  const lines: string[] = [];
  const step = (name: string, extra: Partial<StopStep> = {}): StopStep => ({
    name,
    run: async () => {
      order.push(name);
    },
    ...extra,
  });
  return { order, lines, log: (l: string) => lines.push(l), step };
}

/** A step that runs until its signal aborts (a hung `pulumi destroy`). */
function hung(name: string, seen: { aborted?: string }, extra: Partial<StopStep> = {}): StopStep {
  return {
    name,
    run: (signal) =>
      new Promise<void>(() => {
        signal.addEventListener("abort", () => {
          seen.aborted = String(signal.reason);
        });
      }),
    ...extra,
  };
}

describe("StopSequence", () => {
  it("runs the steps newest first, once, after the first request", async () => {
    const r = recorder();
    const stop = new StopSequence({ log: r.log });
    stop.defer(r.step("temp dirs"));
    stop.defer(r.step("control plane"));
    stop.defer(r.step("pulumi destroy", { skippable: true }));
    stop.defer(r.step("port-forward"));
    expect(r.order).toEqual([]);
    expect(stop.signal.aborted).toBe(false);
    expect(stop.request("SIGINT")).toBe("stopping");
    expect(stop.signal.aborted).toBe(true);
    expect(await stop.done()).toEqual([]);
    expect(r.order).toEqual(["port-forward", "pulumi destroy", "control plane", "temp dirs"]);
  });

  it("done() taken before the first request resolves once the steps have run (the demo awaits it while serving)", async () => {
    const r = recorder();
    const stop = new StopSequence({ log: r.log });
    stop.defer(r.step("control plane"));
    const done = stop.done();
    let resolved = false;
    void done.then(() => (resolved = true));
    await flush();
    expect(resolved).toBe(false);
    stop.request("SIGTERM");
    expect(await done).toEqual([]);
    expect(r.order).toEqual(["control plane"]);
  });

  it("keeps going past a failed step and reports it", async () => {
    const r = recorder();
    const stop = new StopSequence({ log: r.log });
    stop.defer(r.step("control plane"));
    stop.defer({ name: "pulumi destroy", run: async () => Promise.reject(new Error("stack locked")) });
    expect(await stop.stopNow("test")).toEqual(["pulumi destroy: stack locked"]);
    expect(r.order).toEqual(["control plane"]);
  });

  it("gives up on a step after its bound, aborts it, and goes on", async () => {
    const t = fakeTime();
    const r = recorder();
    const seen: { aborted?: string } = {};
    const stop = new StopSequence({ log: r.log, now: t.now, sleep: t.sleep });
    stop.defer(r.step("control plane"));
    stop.defer(hung("pulumi destroy", seen, { timeoutMs: 120_000, skippable: true }));
    stop.request("SIGINT");
    await flush();
    t.advance(119_999);
    await flush();
    expect(r.order).toEqual([]);
    t.advance(1);
    expect(await stop.done()).toEqual(["pulumi destroy: gave up after 120 s"]);
    expect(seen.aborted).toContain("timeout");
    expect(r.order).toEqual(["control plane"]);
  });

  it("a second request skips the destroy in progress and every later skippable step; a third forces", async () => {
    const t = fakeTime();
    const r = recorder();
    const seen: { aborted?: string } = {};
    const stop = new StopSequence({ log: r.log, now: t.now, sleep: t.sleep });
    stop.defer(r.step("temp dirs"));
    stop.defer(r.step("another skippable", { skippable: true }));
    stop.defer(r.step("control plane"));
    stop.defer(hung("pulumi destroy", seen, { skippable: true }));
    expect(stop.request("SIGINT")).toBe("stopping");
    await flush();
    t.advance(5_000);
    expect(stop.request("SIGINT")).toBe("skipping");
    expect(await stop.done()).toEqual([]);
    expect(seen.aborted).toContain("skipped");
    expect(r.order).toEqual(["control plane", "temp dirs"]);
    expect(r.lines).toContain("sbx demo: skipped pulumi destroy");
    expect(r.lines).toContain("sbx demo: skipped another skippable");
    t.advance(5_000);
    expect(stop.request("SIGINT")).toBe("force");
  });

  it("counts requests within the debounce window as one (Ctrl-C reaches node and npm relays it)", async () => {
    const t = fakeTime();
    const r = recorder();
    const seen: { aborted?: string } = {};
    const stop = new StopSequence({ log: r.log, now: t.now, sleep: t.sleep, debounceMs: 1000 });
    stop.defer(hung("pulumi destroy", seen, { skippable: true }));
    stop.request("SIGINT");
    t.advance(10);
    expect(stop.request("SIGINT")).toBe("repeat");
    await flush();
    expect(seen.aborted).toBeUndefined();
    t.advance(2_000);
    expect(stop.request("SIGINT")).toBe("skipping");
    expect(await stop.done()).toEqual([]);
  });

  it("with nothing skippable left, a second request forces", async () => {
    const t = fakeTime();
    const stop = new StopSequence({ log: () => undefined, now: t.now, sleep: t.sleep });
    stop.defer(hung("control plane", {}, { timeoutMs: 60_000 }));
    stop.request("SIGTERM");
    t.advance(5_000);
    expect(stop.request("SIGTERM")).toBe("force");
  });

  it("a stop during a tracked phase waits for it before the first step", async () => {
    const r = recorder();
    const stop = new StopSequence({ log: r.log });
    stop.defer(r.step("pulumi destroy"));
    let finishUp: () => void = () => undefined;
    const up = stop.track(
      "pulumi up",
      new Promise<void>((resolve) => {
        finishUp = () => {
          r.order.push("up finished");
          resolve();
        };
      }),
      60_000,
    );
    stop.request("SIGINT");
    await flush();
    expect(r.order).toEqual([]);
    finishUp();
    await up;
    expect(await stop.done()).toEqual([]);
    expect(r.order).toEqual(["up finished", "pulumi destroy"]);
  });

  it("waits for a tracked phase at most its bound, and does not count the phase's own failure", async () => {
    const t = fakeTime();
    const r = recorder();
    const stop = new StopSequence({ log: r.log, now: t.now, sleep: t.sleep });
    stop.defer(r.step("control plane"));
    stop.track("the control-plane boot", new Promise<void>(() => undefined), 120_000);
    stop.request("SIGINT");
    await flush();
    t.advance(120_000);
    expect(await stop.done()).toEqual([]);
    expect(r.order).toEqual(["control plane"]);
    expect(r.lines).toContain("sbx demo: went on without waiting for the control-plane boot (timeout)");

    const failedPhase = new StopSequence({ log: () => undefined });
    failedPhase.track("pulumi up", Promise.reject(new Error("up failed")), 1000).catch(() => undefined);
    expect(await failedPhase.stopNow("test")).toEqual([]);
  });
});

describe("listenForStop", () => {
  class FakeProcess extends EventEmitter {
    ppid = 4242;
  }

  it("turns SIGINT and SIGTERM into requests", () => {
    const source = new FakeProcess();
    const reasons: string[] = [];
    const off = listenForStop((r) => reasons.push(r), { source, underNpm: false });
    source.emit("SIGINT");
    source.emit("SIGTERM");
    expect(reasons).toEqual(["SIGINT", "SIGTERM"]);
    off();
  });

  it("under npm, asks to stop once when re-parented (npm was killed)", async () => {
    const source = new FakeProcess();
    const reasons: string[] = [];
    const off = listenForStop((r) => reasons.push(r), { source, underNpm: true, pollMs: 5 });
    await new Promise((r) => setTimeout(r, 30));
    expect(reasons).toEqual([]);
    source.ppid = 1;
    await new Promise((r) => setTimeout(r, 50));
    expect(reasons).toEqual(["the npm that ran the demo exited"]);
    off();
  });

  it("not under npm, ignores the parent", async () => {
    const source = new FakeProcess();
    const reasons: string[] = [];
    listenForStop((r) => reasons.push(r), { source, underNpm: false, pollMs: 5 });
    source.ppid = 1;
    await new Promise((r) => setTimeout(r, 30));
    expect(reasons).toEqual([]);
  });
});
