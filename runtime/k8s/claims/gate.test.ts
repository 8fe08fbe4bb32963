// The first command of a write-behind claim waits for its patch; a lost claim's command waits
// for the cold pod; commands after that go straight through.
import { describe, expect, it } from "vitest";
import type { SandboxLookup } from "../lookup.ts";
import type { SandboxResource } from "../resource.ts";
import { gateOnClaims } from "./gate.ts";
import type { ClaimOutcome } from "./writeBehind.ts";

const tick = () => new Promise((r) => setImmediate(r));

function harness() {
  const pending = new Map<string, Promise<ClaimOutcome>>();
  const calls: string[] = [];
  const lookup: SandboxLookup = {
    resource: async (id) => {
      calls.push(`resource ${id}`);
      return {} as SandboxResource;
    },
    runningPod: async (id) => {
      calls.push(`runningPod ${id}`);
      return { cr: {} as SandboxResource, podName: "p" };
    },
  };
  let ready!: () => void;
  const gated = gateOnClaims(lookup, {
    claims: { landed: (id) => pending.get(id) },
    awaitReady: async (id) => {
      calls.push(`awaitReady ${id}`);
      await new Promise<void>((r) => (ready = r));
    },
  });
  return { pending, calls, gated, ready: () => ready() };
}

function deferred() {
  let resolve!: (o: ClaimOutcome) => void;
  const promise = new Promise<ClaimOutcome>((r) => (resolve = r));
  return { promise, resolve };
}

describe("gateOnClaims", () => {
  it("holds the first command until the claim landed", async () => {
    const h = harness();
    const d = deferred();
    h.pending.set("sb", d.promise);
    const exec = h.gated.runningPod("sb");
    const logs = h.gated.resource("sb");
    await tick();
    expect(h.calls).toEqual([]);
    d.resolve("landed");
    await Promise.all([exec, logs]);
    expect(h.calls).toEqual(["runningPod sb", "resource sb"]);
  });

  it("after a lost claim, waits for the cold pod before the command reaches a pod", async () => {
    const h = harness();
    const d = deferred();
    h.pending.set("sb", d.promise);
    const exec = h.gated.runningPod("sb");
    d.resolve("lost");
    await tick();
    expect(h.calls).toEqual(["awaitReady sb"]);
    h.ready();
    await exec;
    expect(h.calls).toEqual(["awaitReady sb", "runningPod sb"]);
  });

  it("a sandbox with no claim pending is not held", async () => {
    const h = harness();
    await h.gated.runningPod("cold");
    expect(h.calls).toEqual(["runningPod cold"]);
  });
});
