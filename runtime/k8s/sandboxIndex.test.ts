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
    index.watched.upsertResource(record());
    const waiting = index.awaitReady("sb-1", 10_000);
    index.watched.upsertPod(withRv(running(false), "5"));
    index.watched.upsertPod(withRv(running(true), "6"));
    await expect(waiting).resolves.toMatchObject({ id: "sb-1", ready: true });
  });

  it("rejects a waiter with the reason when the sandbox fails, and NotFound when its record goes", async () => {
    const { index } = setup();
    index.watched.upsertResource(record());
    const failing = index.awaitReady("sb-1", 10_000);
    index.watched.upsertPod(withRv(terminated(137, "OOMKilled"), "5"));
    await expect(failing).rejects.toMatchObject({ code: "failed", details: { reason: "OOMKilled" } });
    const other = setup();
    other.index.watched.upsertResource(record());
    const gone = other.index.awaitReady("sb-1", 10_000);
    other.index.watched.deleteResource("sb-1");
    await expect(gone).rejects.toMatchObject({ code: "not_found" });
  });

  it("times out on the injected clock", async () => {
    const { index, clock } = setup();
    index.watched.upsertResource(record());
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
    index.watched.upsertResource(record());
    index.watched.upsertPod(withRv(running(true), "5"));
    index.watched.upsertPod(withRv(running(true), "6")); // same view: no event
    index.watched.deleteResource("sb-1");
    expect(
      events.map((e) => (e.type === "upsert" ? `${e.sandbox.phase}/${e.sandbox.ready}` : `delete/${e.owner}`)),
    ).toEqual(["Pending/false", "Running/true", "delete/alice"]);
  });

  it("ignores an older resourceVersion arriving after a newer one (write-through vs watch)", () => {
    const { index } = setup();
    index.watched.upsertResource(record());
    index.watched.upsertPod(withRv(running(true), "9"));
    index.watched.upsertPod(withRv(running(false), "8"));
    expect(index.sandbox("sb-1")!.ready).toBe(true);
  });
});

describe("SandboxIndex: one writer (the watch) and this replica's own writes as an overlay", () => {
  const withMetadata = (rv: string, k: string) => {
    const r = record();
    return withRv({ ...r, spec: { ...r.spec, metadata: { k } } }, rv);
  };

  it("shows an own write to its own next read, then replaces it with the watched object", () => {
    const { index } = setup();
    index.watched.upsertResource(withMetadata("5", "watched-before"));
    const mine = withMetadata("7", "mine");
    index.own.upsertResource(mine);
    expect(index.resource("sb-1")).toBe(mine);
    expect(index.sandbox("sb-1")!.metadata).toEqual({ k: "mine" });
    // the watch is behind this replica's write: the own write still wins
    index.watched.upsertResource(withMetadata("6", "watch-lagging"));
    expect(index.sandbox("sb-1")!.metadata).toEqual({ k: "mine" });
    // the watch delivers the written object: it replaces the overlay
    const delivered = withMetadata("7", "delivered");
    index.watched.upsertResource(delivered);
    expect(index.resource("sb-1")).toBe(delivered);
    // and the overlay is gone: a newer watched object is read, not the old own write
    index.watched.upsertResource(withMetadata("8", "later"));
    expect(index.sandbox("sb-1")!.metadata).toEqual({ k: "later" });
  });

  it("drops an own record the watch never had, and keeps what the watch has", () => {
    const { index, events } = setup();
    index.own.upsertResource(record()); // accepted, not written yet (no resourceVersion)
    expect(index.sandbox("sb-1")).toBeDefined();
    index.own.deleteResource("sb-1");
    expect(index.sandbox("sb-1")).toBeUndefined();
    expect(events.map((e) => e.type)).toEqual(["upsert", "delete"]);
    index.watched.upsertResource(withMetadata("5", "watched"));
    index.own.upsertResource(withMetadata("6", "mine"));
    index.own.deleteResource("sb-1");
    expect(index.sandbox("sb-1")!.metadata).toEqual({ k: "watched" });
  });
});
