import { describe, expect, it } from "vitest";
import { StartGate } from "./startGate.ts";

describe("StartGate", () => {
  it("lets `starting` in at once, queues `waiting` in order, refuses past that", async () => {
    const gate = new StartGate(2, 2);
    const a = await gate.enter()!;
    const b = await gate.enter()!;
    const order: string[] = [];
    const queued = (name: string) =>
      gate.enter()!.then((release) => {
        order.push(name);
        return release;
      });
    const c = queued("c");
    const d = queued("d");
    expect(gate.enter()).toBeUndefined();
    expect(gate.load).toEqual({ starting: 2, waiting: 2 });
    a();
    a(); // a second release is a no-op: it must not free a slot someone else holds
    const rc = await c;
    expect(order).toEqual(["c"]);
    expect(gate.load).toEqual({ starting: 2, waiting: 1 });
    b();
    const rd = await d;
    expect(order).toEqual(["c", "d"]);
    rc();
    rd();
    expect(gate.load).toEqual({ starting: 0, waiting: 0 });
    expect(gate.enter()).toBeDefined();
  });
});
