import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { silentLogger } from "../core/log.ts";
import type { SandboxEvent } from "../core/types.ts";
import { SandboxIndex } from "./sandboxIndex.ts";
import { record, running, terminated } from "./testFixtures.ts";

function setup() {
  const clock = new ManualClock();
  const index = new SandboxIndex({ credentialsRequired: false, clock, logger: silentLogger() });
  const events: SandboxEvent[] = [];
  index.subscribe((e) => events.push(e));
  return { clock, index, events };
}
const withRv = <T extends { metadata?: { resourceVersion?: string } }>(o: T, rv: string): T => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: rv },
});

describe("SandboxIndex", () => {
  it("wakes a waiter when the pod becomes ready, without polling", async () => {
    const { index } = setup();
    index.upsertResource(record());
    const waiting = index.awaitReady("sb-1", 10_000);
    index.upsertPod(withRv(running(false), "5"));
    index.upsertPod(withRv(running(true), "6"));
    await expect(waiting).resolves.toMatchObject({ id: "sb-1", ready: true });
  });

  it("rejects a waiter with the reason when the sandbox fails, and NotFound when its record goes", async () => {
    const { index } = setup();
    index.upsertResource(record());
    const failing = index.awaitReady("sb-1", 10_000);
    index.upsertPod(withRv(terminated(137, "OOMKilled"), "5"));
    await expect(failing).rejects.toMatchObject({ code: "failed", details: { reason: "OOMKilled" } });
    const other = setup();
    other.index.upsertResource(record());
    const gone = other.index.awaitReady("sb-1", 10_000);
    other.index.deleteResource("sb-1");
    await expect(gone).rejects.toMatchObject({ code: "not_found" });
  });

  it("times out on the injected clock", async () => {
    const { index, clock } = setup();
    index.upsertResource(record());
    const waiting = index.awaitReady("sb-1", 5_000);
    await clock.advance(4_999);
    let settled = false;
    waiting.catch(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    expect(settled).toBe(false);
    await clock.advance(1);
    await expect(waiting).rejects.toMatchObject({ code: "timeout" });
  });

  it("emits one event per change of the derived sandbox, and a delete with the owner", () => {
    const { index, events } = setup();
    index.upsertResource(record());
    index.upsertPod(withRv(running(true), "5"));
    index.upsertPod(withRv(running(true), "6")); // same view: no event
    index.deleteResource("sb-1");
    expect(
      events.map((e) => (e.type === "upsert" ? `${e.sandbox.phase}/${e.sandbox.ready}` : `delete/${e.owner}`)),
    ).toEqual(["Pending/false", "Running/true", "delete/alice"]);
  });

  it("ignores an older resourceVersion arriving after a newer one (write-through vs watch)", () => {
    const { index } = setup();
    index.upsertResource(record());
    index.upsertPod(withRv(running(true), "9"));
    index.upsertPod(withRv(running(false), "8"));
    expect(index.sandbox("sb-1")!.ready).toBe(true);
  });
});
