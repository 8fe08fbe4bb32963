// The E2B control-plane layer driven by the REAL, unmodified e2b SDK (2.51) against the real local
// backend (bubblewrap sandboxes) with a real snapshot registry (so pause and connect-resume run for
// real). The SDK gets apiUrl/sandboxUrl/apiKey as options, never through process.env, so nothing
// leaks into other test files. The layer's clock is a ManualClock: timeout ends are moved and
// enforced without sleeping; the Manager keeps the system clock (sandboxes really run).
import { randomUUID } from "node:crypto";
import { finished } from "node:stream/promises";
import { AuthenticationError, RateLimitError, Sandbox, SandboxError, SandboxNotFoundError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { ManualClock, systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { type E2bLayer, registerE2b } from "../../runtime/server/e2b/plugin.ts";
import { localConfig, TOKENS, testTokens } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

const MAX_TTL = 3600;
let registry: TestRegistry;
let manager: SandboxManager;
let app: ReturnType<typeof buildApp>;
let layer: E2bLayer;
let url: string;
let cleanup: () => void;
const clock = new ManualClock(Date.now());
/** 429s the create route answered: the SDK's retries show up here */
let rejectedCreates = 0;

const sdk = (owner: keyof typeof TOKENS | "nobody" = "alice", extra: Record<string, unknown> = {}) => ({
  apiKey: owner === "nobody" ? "e2b_0000000000000000000000000000000000000000" : TOKENS[owner],
  apiUrl: url,
  sandboxUrl: url,
  requestTimeoutMs: 120_000,
  ...extra,
});

beforeAll(async () => {
  registry = await startRegistry();
  // room for three nano sandboxes (100m each), no more: the over-budget case fills it
  const made = localConfig({
    budget: { cpu: "300m", memory: "4Gi" },
    snapshots: { registry: registry.url },
    defaults: { maxTtlSeconds: MAX_TTL, ttlSeconds: 600 },
  });
  cleanup = made.cleanup;
  const logger = silentLogger();
  const platform = createLocalPlatform(made.config, { logger, clock: systemClock });
  ({ manager } = await buildManager(made.config, { logger, clock: systemClock, platform }));
  app = buildApp({ manager, tokens: testTokens(), logger, e2b: false });
  app.addHook("onResponse", async (req, reply) => {
    if (req.url === "/v2/sandboxes" && req.method === "POST" && reply.statusCode === 429) rejectedCreates++;
  });
  const registered = registerE2b(app, {
    manager,
    tokens: testTokens(),
    logger,
    clock,
    maxTtlSeconds: MAX_TTL,
    sweepIntervalMs: 0,
  });
  await manager.start({ reaper: false });
  url = await app.listen({ host: "127.0.0.1", port: 0 });
  layer = await registered;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await manager?.close();
  await registry?.stop();
  cleanup?.();
});

/** the token create/connect returned, which the SDK keeps to itself */
const tokenOf = (s: Sandbox) => (s as unknown as { envdAccessToken: string }).envdAccessToken;

async function sh(id: string, script: string): Promise<string> {
  const session = await manager.exec("alice", id, { command: ["sh", "-c", script] });
  let out = "";
  session.stdout.on("data", (b: Buffer) => (out += b.toString()));
  session.stderr.resume();
  // the result can settle before the last output is read: wait for both
  const [r] = await Promise.all([session.result, finished(session.stdout), finished(session.stderr)]);
  if (r.exitCode !== 0) throw new Error(`${script} exited ${r.exitCode}`);
  return out;
}

const run = randomUUID();

describe("E2B REST with the real SDK (local platform)", () => {
  let a: Sandbox;

  it("creates with template, timeout, metadata and envs; getInfo shows them", async () => {
    a = await Sandbox.create("base", {
      ...sdk(),
      timeoutMs: 120_000,
      metadata: { run, kind: "a" },
      envs: { GREETING: "hello from e2b" },
    });
    const info = await a.getInfo();
    expect(info.sandboxId).toBe(a.sandboxId);
    expect(info.templateId).toBe("base");
    expect(info.metadata).toEqual({ run, kind: "a" }); // the layer's reserved keys never show
    expect(info.state).toBe("running");
    expect(info.envdVersion).toBe("0.5.7");
    expect(info.cpuCount).toBe(1);
    expect(info.memoryMB).toBeGreaterThan(0);
    const seconds = (info.endAt.getTime() - clock.now().getTime()) / 1000;
    expect(seconds).toBeGreaterThan(110);
    expect(seconds).toBeLessThanOrEqual(120);
    // envVars reach every command, as the Manager's create-time env
    expect(await sh(a.sandboxId, 'printf %s "$GREETING"')).toBe("hello from e2b");
    // the access token opens exactly this sandbox, for its owner
    expect(await layer.access.resolve(a.sandboxId, tokenOf(a))).toEqual({ owner: "alice", sandboxId: a.sandboxId });
    expect(await layer.access.resolve(a.sandboxId, `${tokenOf(a)}x`)).toBeUndefined();
    expect(await layer.access.resolve(a.sandboxId, undefined)).toBeUndefined();
  });

  it("lists filtered by metadata, and pages with x-next-token", async () => {
    const b = await Sandbox.create("base", { ...sdk(), metadata: { run, kind: "b" } });
    const onlyA = await Sandbox.list({ ...sdk(), query: { metadata: { run, kind: "a" } } }).nextItems();
    expect(onlyA.map((s) => s.sandboxId)).toEqual([a.sandboxId]);

    const pages = Sandbox.list({ ...sdk(), query: { metadata: { run } }, limit: 1 });
    const first = await pages.nextItems();
    expect(first).toHaveLength(1);
    expect(pages.hasNext).toBe(true);
    const second = await pages.nextItems();
    expect(second).toHaveLength(1);
    expect(pages.hasNext).toBe(false);
    expect([...first, ...second].map((s) => s.sandboxId).sort()).toEqual([a.sandboxId, b.sandboxId].sort());
    expect(await Sandbox.kill(b.sandboxId, sdk())).toBe(true);
  });

  it("setTimeout moves the end both ways, and the sweeper ends the sandbox there", async () => {
    await a.setTimeout(30_000);
    let info = await a.getInfo();
    expect(info.endAt.getTime()).toBe(clock.now().getTime() + 30_000);
    await a.setTimeout(600_000);
    info = await a.getInfo();
    expect(info.endAt.getTime()).toBe(clock.now().getTime() + 600_000);
    // beyond the hard TTL: refused by name, not silently capped
    await expect(a.setTimeout((MAX_TTL + 60) * 1000)).rejects.toThrow(/400: timeout: invalid value/);

    await layer.sweeper.sweep();
    expect((await a.getInfo()).state).toBe("running"); // not yet
    await clock.advance(600_001);
    await layer.sweeper.sweep();
    await expect(a.getInfo()).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it("kill returns true, then false", async () => {
    const s = await Sandbox.create("base", sdk());
    expect(await s.kill()).toBe(true);
    expect(await Sandbox.kill(s.sandboxId, sdk())).toBe(false);
  });

  it("pause, then Sandbox.connect resumes with the files intact; pausing a paused one returns false", async () => {
    const s = await Sandbox.create("base", sdk());
    await sh(s.sandboxId, "echo kept > /workspace/note.txt");
    expect(await s.pause()).toBe(true);
    expect((await s.getInfo()).state).toBe("paused");
    expect(await s.pause()).toBe(false);
    expect(await Sandbox.getInfo(s.sandboxId, sdk()).then((i) => i.state)).toBe("paused");
    const ids = async (state: ("running" | "paused")[]) =>
      (await Sandbox.list({ ...sdk(), query: { state } }).nextItems()).map((x) => x.sandboxId);
    expect(await ids(["paused"])).toContain(s.sandboxId);
    expect(await ids(["running"])).not.toContain(s.sandboxId);

    const again = await Sandbox.connect(s.sandboxId, { ...sdk(), timeoutMs: 90_000 });
    const info = await again.getInfo();
    expect(info.state).toBe("running");
    expect(info.endAt.getTime()).toBe(clock.now().getTime() + 90_000);
    expect(await sh(s.sandboxId, "cat /workspace/note.txt")).toBe("kept\n");
    // the same token as create's: derived again from the same key, on any replica
    expect(tokenOf(again)).toBe(tokenOf(s));
    // connect of a running sandbox returns it as it is
    expect((await Sandbox.connect(s.sandboxId, sdk())).sandboxId).toBe(s.sandboxId);
    expect(await again.kill()).toBe(true);
  });

  it("lifecycle onTimeout 'pause' pauses at the end instead of killing", async () => {
    const s = await Sandbox.create("base", { ...sdk(), timeoutMs: 60_000, lifecycle: { onTimeout: "pause" } });
    await clock.advance(60_001);
    await layer.sweeper.sweep();
    expect((await s.getInfo()).state).toBe("paused");
    expect(await s.kill()).toBe(true);
  });

  it("the SDK 1.x routes: refreshes extends the end, GET /sandboxes lists running sandboxes", async () => {
    const s = await Sandbox.create("base", { ...sdk(), timeoutMs: 60_000 });
    const headers = { "x-api-key": TOKENS.alice, "content-type": "application/json" };
    const refreshed = await fetch(`${url}/sandboxes/${s.sandboxId}/refreshes`, {
      method: "POST",
      headers,
      body: JSON.stringify({ duration: 1000 }),
    });
    expect(refreshed.status).toBe(204);
    expect((await s.getInfo()).endAt.getTime()).toBe(clock.now().getTime() + 1_000_000);
    const listed = await fetch(`${url}/sandboxes`, { headers: { "x-api-key": TOKENS.alice } });
    const rows = (await listed.json()) as { sandboxID: string }[];
    expect(rows.map((x) => x.sandboxID)).toContain(s.sandboxId);
    expect(await s.kill()).toBe(true);
  });

  it("a bad or missing key is an AuthenticationError, on every E2B route", async () => {
    await expect(Sandbox.create("base", sdk("nobody"))).rejects.toBeInstanceOf(AuthenticationError);
    await expect(Sandbox.getInfo(a.sandboxId, sdk("nobody"))).rejects.toBeInstanceOf(AuthenticationError);
    await expect(Sandbox.list(sdk("nobody")).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
    for (const path of [
      "/v2/sandboxes",
      "/v2/no-such-route",
      "/sandboxes/x/no-such-route",
      "/v2",
      "/templates",
      "/snapshots/x",
    ]) {
      const res = await fetch(`${url}${path}`, { headers: { "x-api-key": "wrong" } });
      expect(res.status, path).toBe(401);
      expect(await res.json(), path).toMatchObject({ code: 401, message: expect.stringContaining("X-API-KEY") });
      expect((await fetch(`${url}${path}`)).status, path).toBe(401);
    }
    // a good key on an unknown E2B route: E2B's 404 body
    const res = await fetch(`${url}/v2/no-such-route`, { headers: { "x-api-key": TOKENS.alice } });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: 404 });
    // an E2B feature sbx lacks says so, in E2B's body
    const vol = await fetch(`${url}/volumes`, { headers: { "x-api-key": TOKENS.alice } });
    expect(vol.status).toBe(404);
    expect(await vol.json()).toMatchObject({
      code: 404,
      message: expect.stringContaining("volumes are not supported"),
    });
  });

  it("another owner's sandbox is not found", async () => {
    const s = await Sandbox.create("base", sdk());
    await expect(Sandbox.getInfo(s.sandboxId, sdk("bob"))).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.connect(s.sandboxId, sdk("bob"))).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.setTimeout(s.sandboxId, 10_000, sdk("bob"))).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.pause(s.sandboxId, sdk("bob"))).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.kill(s.sandboxId, sdk("bob"))).toBe(false);
    expect(await Sandbox.list(sdk("bob")).nextItems()).toEqual([]);
    // alice's token does not open it for bob's key either way: the token names alice
    expect(await layer.access.resolve(s.sandboxId, tokenOf(s))).toMatchObject({ owner: "alice" });
    expect(await s.kill()).toBe(true);
  });

  it("an unknown template is a SandboxError naming templateID", async () => {
    const err = await Sandbox.create("no-such-template", sdk()).catch((e) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(String(err.message)).toMatch(/^400: templateID: invalid value "no-such-template": unknown template/);
  });

  it("over budget is the SDK's RateLimitError, after its retry", async () => {
    const held = await Promise.all([1, 2, 3].map(() => Sandbox.create("base", sdk())));
    rejectedCreates = 0;
    // retries: 1 and admission's Retry-After (5 s) keep this to one wait
    const err = await Sandbox.create("base", sdk("alice", { retries: 1 })).catch((e) => e);
    expect(err).toBeInstanceOf(RateLimitError);
    expect(rejectedCreates).toBe(2);
    await Promise.all(held.map((s) => s.kill()));
  }, 120_000);
});
