// The pause a feed asks of its process: on above the high mark, off again once the reader has
// drained the queue to half of it, whatever the sizes of the chunks it read on the way.
import { describe, expect, it } from "vitest";
import { FeedSet, HIGH_WATER_BYTES } from "./feed.ts";

const KIB = 1024;
const never = new AbortController().signal;

/** a feed set whose pause calls are recorded, and one feed on it */
function recorded() {
  const calls: boolean[] = [];
  const set = new FeedSet((paused) => calls.push(paused));
  return { calls, set, feed: set.add() };
}

describe("FeedSet backpressure", () => {
  it.each([
    // chunk sizes as the local relay and the Kubernetes channel hand them on
    ["64 KiB chunks", 64 * KIB],
    ["16 KiB chunks", 16 * KIB],
    ["1 KiB chunks", KIB],
    ["one chunk past the mark", HIGH_WATER_BYTES + 1],
  ])("%s: pauses above the high mark and resumes once drained to half of it", async (_name, size) => {
    const { calls, set, feed } = recorded();
    let queued = 0;
    while (queued <= HIGH_WATER_BYTES) {
      set.data("stdout", new Uint8Array(size));
      queued += size;
    }
    expect(calls).toEqual([true]);
    // read one chunk at a time; the resume comes with the read that reaches the low mark
    while (queued > HIGH_WATER_BYTES / 2) {
      expect(calls).toEqual([true]);
      await feed.next(never, 1000);
      queued -= size;
    }
    expect(calls).toEqual([true, false]);
  });

  it("stays paused between the marks: new output does not resume it early", async () => {
    const { calls, set, feed } = recorded();
    const chunk = 64 * KIB;
    for (let q = 0; q <= HIGH_WATER_BYTES; q += chunk) set.data("stdout", new Uint8Array(chunk));
    await feed.next(never, 1000);
    await feed.next(never, 1000); // below the high mark, above the low one
    set.data("stderr", new Uint8Array(1)); // output already on its way when the pause came
    expect(calls).toEqual([true]);
  });

  it("a full feed that closes (its reader went away) resumes the process", () => {
    const { calls, set, feed } = recorded();
    set.data("stdout", new Uint8Array(HIGH_WATER_BYTES + 1));
    feed.close();
    expect(calls).toEqual([true, false]);
  });

  it("pauses while any feed is full: a fast reader waits for the slow one", async () => {
    const { calls, set, feed: slow } = recorded();
    const fast = set.add();
    const chunk = 64 * KIB;
    for (let q = 0; q <= HIGH_WATER_BYTES; q += chunk) set.data("stdout", new Uint8Array(chunk));
    expect(calls).toEqual([true]);
    while ((await fast.next(never, 1)) !== "idle");
    expect(calls).toEqual([true]);
    for (let q = 0; q < HIGH_WATER_BYTES / 2 + chunk; q += chunk) await slow.next(never, 1000);
    expect(calls).toEqual([true, false]);
  });
});
