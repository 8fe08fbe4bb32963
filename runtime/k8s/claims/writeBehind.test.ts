// The write-behind claim with an injected patch and clock: a claim is decided and visible at
// once while its patch is still unanswered, and a refused, failed or unanswered patch loses it.
import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../core/clock.ts";
import { silentLogger } from "../../core/log.ts";
import type { SandboxSpec } from "../../core/types.ts";
import { type Reservation, WriteBehindClaims } from "./writeBehind.ts";

const spec = (id: string) => ({ id }) as SandboxSpec;
const pod = (name: string, rv: string, labels: Record<string, string> = { "sbx.dev/pool": "warm" }): V1Pod => ({
  metadata: { name, resourceVersion: rv, labels },
});
const tick = () => new Promise((r) => setImmediate(r));

/** a pool of pods whose patches answer only when the test says so */
function harness(names: string[], timeoutMs = 1_000) {
  const index = new Map<string, V1Pod>(names.map((n) => [n, pod(n, "1")]));
  const writes: { name: string; resolve(p: V1Pod): void; reject(e: unknown): void }[] = [];
  const clock = new ManualClock();
  const claims = new WriteBehindClaims({
    reserve: (s, owns): Reservation | undefined => {
      const free = [...index.values()].find(
        (p) => p.metadata!.labels!["sbx.dev/pool"] === "warm" && owns(p.metadata!.name!),
      );
      if (!free) return undefined;
      const name = free.metadata!.name!;
      return {
        pod: free,
        claimed: pod(name, "1", { "sbx.dev/pool": "claimed", "sbx.dev/sandbox": s.id }),
        write: () => new Promise<V1Pod>((resolve, reject) => writes.push({ name, resolve, reject })),
      };
    },
    owns: (name) => name !== "not-mine",
    pods: { upsertPod: (p) => index.set(p.metadata!.name!, p), pod: (n) => index.get(n) },
    isLostRace: (err) => (err as { code?: number }).code === 409,
    clock,
    logger: silentLogger(),
    claimTimeoutMs: timeoutMs,
  });
  return { index, writes, clock, claims };
}

describe("WriteBehindClaims", () => {
  it("returns the claim at once, before its patch is answered, and shows the pod claimed here", async () => {
    const h = harness(["p1"]);
    const taken = h.claims.take(spec("sb-1"));
    expect(taken?.podName).toBe("p1");
    expect(h.writes.map((w) => w.name)).toEqual(["p1"]); // sent, not answered
    expect(h.index.get("p1")!.metadata!.labels!["sbx.dev/sandbox"]).toBe("sb-1");
    expect(h.claims.landed("sb-1")).toBe(taken!.outcome);
    let settled = false;
    void taken!.outcome.then(() => (settled = true));
    await tick();
    expect(settled).toBe(false);
    expect(h.claims.stats()).toEqual({ taken: 1, landed: 0, lost: 0, pending: 1 });

    h.writes[0].resolve(pod("p1", "2", { "sbx.dev/pool": "claimed", "sbx.dev/sandbox": "sb-1" }));
    expect(await taken!.outcome).toBe("landed");
    expect(h.index.get("p1")!.metadata!.resourceVersion).toBe("2");
    await tick();
    expect(h.claims.landed("sb-1")).toBeUndefined(); // later commands do not wait
    expect(h.claims.stats()).toEqual({ taken: 1, landed: 1, lost: 0, pending: 0 });
  });

  it("claims only pods of its own partition", () => {
    const h = harness(["not-mine"]);
    expect(h.claims.take(spec("sb-1"))).toBeUndefined();
  });

  it.each([
    ["refused (409: another claim won)", { code: 409 }],
    ["failed (API server error)", new Error("connection reset")],
  ])("a patch %s loses the claim and takes the optimistic copy out of the index", async (_, err) => {
    const h = harness(["p1"]);
    const taken = h.claims.take(spec("sb-1"))!;
    h.writes[0].reject(err);
    expect(await taken.outcome).toBe("lost");
    expect(h.index.get("p1")!.metadata!.labels).toEqual({ "sbx.dev/pool": "warm" });
    expect(h.claims.stats().lost).toBe(1);
  });

  it("keeps what the informer saw meanwhile (the winner's pod), never the stale original", async () => {
    const h = harness(["p1"]);
    const taken = h.claims.take(spec("sb-1"))!;
    const winner = pod("p1", "3", { "sbx.dev/pool": "claimed", "sbx.dev/sandbox": "other" });
    h.index.set("p1", winner);
    h.writes[0].reject({ code: 409 });
    expect(await taken.outcome).toBe("lost");
    expect(h.index.get("p1")).toBe(winner);
  });

  it("a patch unanswered for claimTimeoutMs loses the claim (on the injected clock)", async () => {
    const h = harness(["p1"], 5_000);
    const taken = h.claims.take(spec("sb-1"))!;
    let outcome: string | undefined;
    void taken.outcome.then((o) => (outcome = o));
    await h.clock.advance(4_999);
    await tick();
    expect(outcome).toBeUndefined();
    await h.clock.advance(1);
    await tick();
    expect(outcome).toBe("lost");
    h.writes[0].resolve(pod("p1", "2")); // a late answer changes nothing
    await tick();
    expect(h.claims.stats()).toMatchObject({ landed: 0, lost: 1 });
  });
});
