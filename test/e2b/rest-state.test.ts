// The E2B layer's state lives in the sandbox's reserved metadata, changed through
// Manager.updateMetadata (PATCH /v1/sandboxes/{id} on our own API). On the real local backend:
// /v1 never shows the reserved keys and refuses to set them, the PATCH validates like create,
// and a restarted service sweeps a sandbox whose end passed while it was down, though its owner
// has not called since (the sweeper lists every owner's E2B sandboxes from the records).
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../runtime/core/clock.ts";
import { NotFoundError } from "../../runtime/core/errors.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { RESERVED } from "../../runtime/server/e2b/shape.ts";
import { serveWithE2b, skewedClock } from "../support/e2b.ts";
import { auth, localConfig, TOKENS } from "../support/local.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** The service as startService wires it, on a given state dir, with the layer's clock given. */
async function start(stateDir: string, clock: Clock) {
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 } });
  const logger = silentLogger();
  const platform = createLocalPlatform(config, { logger, clock: systemClock });
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform });
  return { manager, ...(await serveWithE2b(config, manager, logger, clock)) };
}

type Started = Awaited<ReturnType<typeof start>>;

async function startCleaned(stateDir: string, clock: Clock): Promise<Started> {
  const s = await start(stateDir, clock);
  cleanups.push(async () => {
    await s.app.close();
    await s.manager.close();
  });
  return s;
}

const opts = (url: string) => ({ apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: url });

describe("E2B state in sandbox metadata (local platform)", () => {
  const { stateDir, cleanup } = localConfig();
  cleanups.push(cleanup);
  const { skew, clock } = skewedClock();
  let svc: Started;
  let crashed = false;

  it("/v1 hides the reserved keys and refuses to set them; PATCH validates like create", async () => {
    svc = await start(stateDir, clock);
    cleanups.push(async () => {
      if (crashed) return; // the next process adopted its sandboxes: closing this one would stop them
      await svc.app.close();
      await svc.manager.close();
    });
    const s = await Sandbox.create("base", { ...opts(svc.url), metadata: { job: "7" } });
    const v1 = (path: string, init: RequestInit = {}) =>
      svc.app.inject({
        method: (init.method ?? "GET") as "GET",
        url: path,
        headers: { ...auth("alice"), "content-type": "application/json" },
        payload: init.body as string | undefined,
      });
    const got = (await v1(`/v1/sandboxes/${s.sandboxId}`)).json();
    expect(got.metadata).toEqual({ job: "7" });
    const listed = (await v1("/v1/sandboxes")).json().sandboxes.find((x: { id: string }) => x.id === s.sandboxId);
    expect(listed.metadata).toEqual({ job: "7" });
    // the Manager itself sees them: they are the layer's state
    expect((await svc.manager.get("alice", s.sandboxId)).metadata[RESERVED.tokenHash]).toMatch(/^[0-9a-f]{64}$/);

    const patch = (metadata: unknown, id = s.sandboxId, owner: "alice" | "bob" = "alice") =>
      svc.app.inject({
        method: "PATCH",
        url: `/v1/sandboxes/${id}`,
        headers: { ...auth(owner), "content-type": "application/json" },
        payload: JSON.stringify({ metadata }),
      });
    const ok = await patch({ stage: "two", job: null });
    expect(ok.statusCode).toBe(200);
    expect(ok.json().metadata).toEqual({ stage: "two" });
    expect((await svc.manager.get("alice", s.sandboxId)).metadata.job).toBeUndefined();

    const forged = await patch({ [RESERVED.end]: "2099-01-01T00:00:00Z" });
    expect(forged.statusCode).toBe(400);
    expect(forged.json().error.message).toContain(`metadata.${RESERVED.end}`);
    expect(forged.json().error.message).toContain("reserved");
    const created = await svc.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: { ...auth("alice"), "content-type": "application/json" },
      payload: JSON.stringify({ metadata: { [RESERVED.tokenHash]: "0".repeat(64) } }),
    });
    expect(created.statusCode).toBe(400);
    expect(created.json().error.message).toContain(`metadata.${RESERVED.tokenHash}`);

    for (const [bad, want] of [
      [{ "-x": "1" }, "metadata keys are 1-63"],
      [{ k: 5 }, "metadata"],
      [{ k: "v".repeat(300) }, "256"],
      [Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, "v"])), "32"],
      ["text", "metadata"],
      [undefined, "metadata"],
    ] as const) {
      const r = await patch(bad);
      expect(r.statusCode, String(JSON.stringify(bad)).slice(0, 40)).toBe(400);
      expect(r.json().error.message).toContain(want);
    }
    const bare = await svc.app.inject({ method: "PATCH", url: `/v1/sandboxes/${s.sandboxId}`, headers: auth("alice") });
    expect(bare.statusCode).toBe(400);
    expect(bare.json().error.message).toContain("must be object");
    // the total counts what is already there
    const many = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`k${i}`, "v"]));
    const full = await patch(many);
    expect(full.statusCode).toBe(400);
    expect(full.json().error.message).toContain("at most 32 metadata entries");
    expect((await patch({ stage: "x" }, s.sandboxId, "bob")).statusCode).toBe(404);
    expect((await patch({ stage: "x" }, "sbx-nosuchsandbox")).statusCode).toBe(404);
    await s.kill();
  });

  it("a restarted service sweeps a sandbox whose end passed while it was down", async () => {
    const s = await Sandbox.create("base", { ...opts(svc.url), timeoutMs: 60_000 });
    await s.setTimeout(120_000); // a moved end, so the record's end is the one that counts
    // a crash, not a clean stop: the sandbox stays up for the next process to adopt
    crashed = true;
    await svc.app.close();
    await svc.manager.reaper.stop();

    skew.ms = 90_000; // past the create-time end, not the moved one
    const second = await startCleaned(stateDir, clock);
    await second.layer.sweeper.sweep();
    expect((await second.manager.get("alice", s.sandboxId)).phase).toBe("Running");
    skew.ms = 125_000;
    await second.layer.sweeper.sweep();
    await expect(second.manager.get("alice", s.sandboxId)).rejects.toBeInstanceOf(NotFoundError);
  });
});
