import { describe, expect, it } from "vitest";
import { KeyedQueue } from "./keyedQueue.ts";

function deferred(): { promise: Promise<void>; resolve: () => void; reject: (e: Error) => void } {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe("KeyedQueue", () => {
  it("runs one operation per key in call order, keys independently, and continues after a failure", async () => {
    const q = new KeyedQueue();
    const log: string[] = [];
    const first = deferred();
    const a1 = q.run("a", async () => {
      log.push("a1 start");
      await first.promise;
      log.push("a1 end");
      throw new Error("a1 failed");
    });
    const a2 = q.run("a", async () => void log.push("a2"));
    const b1 = q.run("b", async () => void log.push("b1"));
    await b1;
    expect(log).toEqual(["a1 start", "b1"]); // b does not wait for a; a2 waits for a1
    first.resolve();
    await expect(a1).rejects.toThrow("a1 failed");
    await a2;
    expect(log).toEqual(["a1 start", "b1", "a1 end", "a2"]);
    await Promise.resolve();
    await Promise.resolve();
    expect(q.size).toBe(0); // nothing kept once a key is idle
  });
});
