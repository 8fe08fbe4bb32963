// Restarts and bursts on real local sandboxes: the admission budget after a restart equals what
// the live sandboxes use, a keyed create retried after a restart returns the same sandbox, and a
// concurrent burst over capacity admits exactly what fits, rejecting the rest with 429.
import { afterAll, describe, expect, it } from "vitest";
import { auth, type LocalRuntime, localConfig, startLocalRuntime } from "../support/local.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe("restart", () => {
  it("a burst over capacity admits exactly what fits; the restarted manager's budget equals the live sandboxes", async () => {
    const { stateDir, cleanup } = localConfig();
    cleanups.push(cleanup);
    // room for 5 nano (100m cpu each)
    const input = { budget: { cpu: "500m", memory: "8Gi" } };
    const first = await startLocalRuntime(input, { stateDir });
    const burst = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        first.app.inject({
          method: "POST",
          url: "/v1/sandboxes",
          headers: auth(i % 2 ? "alice" : "bob"),
          payload: { size: "nano", clientKey: `burst-${i}` },
        }),
      ),
    );
    const codes = burst.map((r) => r.statusCode).sort();
    expect(codes.filter((c) => c === 201)).toHaveLength(5);
    expect(codes.filter((c) => c === 429)).toHaveLength(7);
    for (const r of burst.filter((b) => b.statusCode === 429)) {
      expect(r.headers["retry-after"]).toBeDefined();
      expect(r.json().error.message).toContain("short on cpu");
    }
    expect(first.manager.admission.usage().used.cpuMillis).toBe(500);
    const accepted = burst.filter((r) => r.statusCode === 201).map((r) => r.json() as { id: string; owner: string });

    for (const s of accepted) await first.manager.wait(s.owner, s.id, { timeoutMs: 60_000 });
    // a crash, not a clean stop: the old manager stops serving but its sandboxes stay up
    await first.app.close();
    await first.manager.reaper.stop();

    const second: LocalRuntime = await startLocalRuntime(input, { stateDir });
    cleanups.push(() => second.close());
    const live = (await second.manager.list({ owner: "alice" })).concat(await second.manager.list({ owner: "bob" }));
    const holding = live.filter((s) => s.phase !== "Failed" && s.phase !== "Succeeded");
    // the local backend adopts sandboxes that survived the crash
    expect(holding.map((s) => s.id).sort()).toEqual(accepted.map((s) => s.id).sort());
    expect(second.manager.admission.usage().used.cpuMillis).toBe(holding.reduce((n, s) => n + s.cpuRequestMillis, 0));
    expect(second.manager.admission.usage().reservations).toBe(holding.length);

    // a keyed retry after the restart lands on the same sandbox, not a new one
    const idx = burst.findIndex((r) => r.statusCode === 201);
    const retry = await second.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth(idx % 2 ? "alice" : "bob"),
      payload: { size: "nano", clientKey: `burst-${idx}` },
    });
    expect(retry.statusCode).toBe(201);
    expect(retry.json().id).toBe(accepted[0].id);
    expect(second.manager.admission.usage().reservations).toBe(holding.length);

    // the first backend object still holds handles from before the "crash"; close it last
    cleanups.push(() => first.manager.close());
  });
});

describe("budget reconcile", () => {
  it("the reaper's pass drops reservations nothing backs and adopts live sandboxes that lost theirs", async () => {
    const rt = await startLocalRuntime({}, {});
    cleanups.push(() => rt.close());
    const res = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: {} });
    const id = res.json().id as string;
    // drift in both directions: a reservation for nothing, and a live sandbox without one
    rt.manager.admission.adopt({
      id: "sbx-ghostghostghost0",
      phase: "Running",
      cpuRequestMillis: 700,
      memoryRequestBytes: 1,
    });
    rt.manager.admission.release(id);
    expect(rt.manager.admission.ids()).toEqual(["sbx-ghostghostghost0"]);
    await rt.manager.reaper.runOnce();
    expect(rt.manager.admission.ids()).toEqual([id]);
    expect(rt.manager.admission.usage().used.cpuMillis).toBe(100);
  });

  it("a create the substrate refuses or fails gives its reservation back", async () => {
    const rt = await startLocalRuntime({ catalog: { base: "host", broken: "/nonexistent/rootfs" } }, {});
    cleanups.push(() => rt.close());
    const res = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth("alice"),
      payload: { profile: "broken" },
    });
    if (res.statusCode === 201) {
      // accepted, then failed while starting: the Failed event releases it
      const id = res.json().id as string;
      const waited = await rt.app.inject({
        method: "POST",
        url: `/v1/sandboxes/${id}/wait`,
        headers: auth("alice"),
        payload: { timeoutSeconds: 20 },
      });
      expect(waited.statusCode).toBeGreaterThanOrEqual(400);
    } else {
      expect(res.statusCode).toBeGreaterThanOrEqual(400);
      expect(res.json().error.message).toContain("nonexistent");
    }
    const t0 = Date.now();
    while (rt.manager.admission.usage().reservations > 0 && Date.now() - t0 < 30_000)
      await new Promise((r) => setTimeout(r, 50));
    expect(rt.manager.admission.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });
});
