// The helper-copy bound: never more than max at once, every caller served in its turn, a
// failing copy gives its slot back.
import { describe, expect, it } from "vitest";
import { UploadSlots } from "./uploadSlots.ts";

describe("UploadSlots", () => {
  it("runs at most max at once, in order, and a failure frees its slot", async () => {
    const slots = new UploadSlots(3);
    let active = 0;
    let peak = 0;
    const order: number[] = [];
    const gates: (() => void)[] = [];
    const runs = Array.from({ length: 20 }, (_, i) =>
      slots.run(async () => {
        active++;
        peak = Math.max(peak, active);
        order.push(i);
        await new Promise<void>((r) => gates.push(r));
        active--;
        if (i % 5 === 0) throw new Error(`copy ${i} failed`);
        return i;
      }),
    );
    const settled = Promise.allSettled(runs);
    while (order.length < 20 || gates.length) {
      await new Promise((r) => setImmediate(r));
      gates.shift()?.();
    }
    const results = await settled;
    expect(peak).toBe(3);
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(results.filter((r) => r.status === "rejected")).toHaveLength(4);
    // every slot came back: a fresh caller runs at once
    expect(await slots.run(async () => "free")).toBe("free");
  });
});
