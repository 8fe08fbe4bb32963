import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { CapacityError } from "../core/errors.ts";
import { silentLogger } from "../core/log.ts";
import { RecordWriter } from "./recordWriter.ts";
import type { SandboxResource } from "./resource.ts";
import { record } from "./testFixtures.ts";

const cr = (name: string): SandboxResource => ({ ...record(), metadata: { ...record().metadata, name } });

function deferred() {
  const calls: { cr: SandboxResource; resolve: (v: SandboxResource) => void; reject: (e: unknown) => void }[] = [];
  const create = (c: SandboxResource) =>
    new Promise<SandboxResource>((resolve, reject) => calls.push({ cr: c, resolve, reject }));
  return { calls, create };
}
const tick = () => new Promise((r) => setImmediate(r));

describe("RecordWriter", () => {
  it("writes behind with bounded concurrency and reports each written record", async () => {
    const d = deferred();
    const written: string[] = [];
    const w = new RecordWriter({
      clock: new ManualClock(),
      logger: silentLogger(),
      create: d.create,
      isConflict: () => false,
      onWritten: (c) => written.push(c.metadata.name),
      onFailed: () => undefined,
      concurrency: 2,
    });
    for (const n of ["a", "b", "c"]) w.enqueue(cr(n));
    expect(d.calls.map((c) => c.cr.metadata.name)).toEqual(["a", "b"]);
    d.calls[0].resolve(cr("a"));
    await tick();
    expect(d.calls.map((c) => c.cr.metadata.name)).toEqual(["a", "b", "c"]);
    d.calls[1].resolve(cr("b"));
    d.calls[2].resolve(cr("c"));
    await w.drain();
    expect(written).toEqual(["a", "b", "c"]);
    expect(w.size).toBe(0);
  });

  it("refuses with 429 when too far behind", () => {
    const d = deferred();
    const w = new RecordWriter({
      clock: new ManualClock(),
      logger: silentLogger(),
      create: d.create,
      isConflict: () => false,
      onWritten: () => undefined,
      onFailed: () => undefined,
      concurrency: 1,
      maxPending: 2,
    });
    w.enqueue(cr("a"));
    w.enqueue(cr("b"));
    expect(() => w.checkRoom()).toThrow(CapacityError);
    expect(() => w.enqueue(cr("c"))).toThrow(/2 sandbox records are waiting to be written/);
  });

  it("cancels a write that has not started, and a crash abandons the queue", async () => {
    const d = deferred();
    const w = new RecordWriter({
      clock: new ManualClock(),
      logger: silentLogger(),
      create: d.create,
      isConflict: () => false,
      onWritten: () => undefined,
      onFailed: () => undefined,
      concurrency: 1,
    });
    w.enqueue(cr("a"));
    w.enqueue(cr("b"));
    w.enqueue(cr("c"));
    expect(w.cancel("a")).toBe(false); // already being written
    expect(w.cancel("b")).toBe(true);
    d.calls[0].resolve(cr("a"));
    await tick();
    expect(d.calls.map((c) => c.cr.metadata.name)).toEqual(["a", "c"]);
    w.enqueue(cr("d"));
    w.abandon();
    d.calls[1].resolve(cr("c"));
    await w.drain();
    expect(d.calls.map((c) => c.cr.metadata.name)).toEqual(["a", "c"]);
  });

  it("retries transient failures with backoff, then fails the sandbox with the reason", async () => {
    const clock = new ManualClock();
    const failed: string[] = [];
    let attempts = 0;
    const w = new RecordWriter({
      clock,
      logger: silentLogger(),
      create: async () => {
        attempts++;
        throw new Error("etcdserver: request timed out");
      },
      isConflict: () => false,
      onWritten: () => undefined,
      onFailed: (id, reason, msg) => failed.push(`${id} ${reason} ${msg}`),
      retries: 2,
    });
    w.enqueue(cr("a"));
    await tick();
    expect(attempts).toBe(1);
    await clock.advance(100);
    await clock.advance(200);
    await w.drain();
    expect(attempts).toBe(3);
    expect(failed[0]).toMatch(/^a RecordWriteFailed .*3 attempts.*etcdserver: request timed out/);
  });

  it("fails a conflicting id at once", async () => {
    const failed: string[] = [];
    const w = new RecordWriter({
      clock: new ManualClock(),
      logger: silentLogger(),
      create: async () => Promise.reject(new Error("409")),
      isConflict: () => true,
      onWritten: () => undefined,
      onFailed: (id, reason) => failed.push(`${id}:${reason}`),
    });
    w.enqueue(cr("a"));
    await w.drain();
    expect(failed).toEqual(["a:IdConflict"]);
  });
});
