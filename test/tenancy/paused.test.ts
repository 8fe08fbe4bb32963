// A team's paused-snapshot limits (pausedSandboxes, pausedBytes), enforced at pause time on the
// REAL local backend with a real registry: a pause past either is a 429 team_quota naming the
// team and the limit, the sandbox keeps running and holds its reservation, and the pause is
// admitted again once the team frees room. The pure decision is table-tested first.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decidePausedQuota, pausedUseOf } from "../../runtime/core/decidePausedQuota.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

const Ki = 1024;

describe("decidePausedQuota", () => {
  it.each([
    { limits: {}, held: { sandboxes: 9, bytes: 9e9 }, adding: 1, over: [] },
    { limits: { pausedSandboxes: 2 }, held: { sandboxes: 1, bytes: 0 }, adding: 1, over: [] },
    { limits: { pausedSandboxes: 2 }, held: { sandboxes: 2, bytes: 0 }, adding: 1, over: ["pausedSandboxes"] },
    { limits: { pausedSandboxes: 0 }, held: { sandboxes: 0, bytes: 0 }, adding: 1, over: ["pausedSandboxes"] },
    { limits: { pausedBytes: 100 }, held: { sandboxes: 3, bytes: 99 }, adding: 1, over: [] },
    { limits: { pausedBytes: 100 }, held: { sandboxes: 3, bytes: 100 }, adding: 1, over: ["pausedBytes"] },
    { limits: { pausedBytes: 100 }, held: { sandboxes: 3, bytes: 60 }, adding: 41, over: ["pausedBytes"] },
    {
      limits: { pausedSandboxes: 1, pausedBytes: 10 },
      held: { sandboxes: 1, bytes: 10 },
      adding: 1,
      over: ["pausedSandboxes", "pausedBytes"],
    },
  ])("$limits holding $held adding $adding: over $over", ({ limits, held, adding, over }) => {
    expect(decidePausedQuota(limits, held, adding)).toEqual(over);
  });

  it("counts the team's snapshots but not the one being re-paused", () => {
    const snaps = [
      { id: "1", owner: "alice", sizeBytes: 10 },
      { id: "2", owner: "alice", sizeBytes: 20 },
      { id: "3", owner: "bob", sizeBytes: 40 },
    ];
    expect(pausedUseOf(snaps, (s) => s.owner === "alice", "2")).toEqual({ sandboxes: 1, bytes: 10 });
  });
});

let registry: TestRegistry;
let rt: LocalRuntime;

beforeAll(async () => {
  registry = await startRegistry();
  rt = await startLocalRuntime({
    budget: { cpu: "2", memory: "4Gi" },
    snapshots: { registry: registry.url },
    tenancy: {
      teams: [
        { name: "agents", members: ["alice"], limits: { pausedSandboxes: 1 } },
        { name: "research", members: ["bob"], limits: { pausedBytes: `${600 * Ki}` } },
      ],
    },
  });
});
afterAll(async () => {
  await rt?.close();
  await registry?.stop();
});

type Who = "alice" | "bob";
const post = (who: Who, path: string, body?: unknown) =>
  rt.app.inject({
    method: "POST",
    url: path,
    headers: auth(who),
    ...(body === undefined ? {} : { payload: body as object }),
  });
const phase = async (who: Who, id: string) =>
  (await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${id}`, headers: auth(who) })).json().phase;
const kill = (who: Who, id: string) =>
  rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${id}`, headers: auth(who) });

async function running(who: Who, fill = 0): Promise<string> {
  const res = await post(who, "/v1/sandboxes", { size: "nano" });
  expect(res.statusCode, res.body).toBe(201);
  const id = res.json().id as string;
  expect((await post(who, `/v1/sandboxes/${id}/wait`, { timeoutSeconds: 60 })).statusCode).toBe(200);
  // incompressible bytes, so the snapshot is at least this big whatever the layer format
  if (fill > 0) await sh(who, id, `head -c ${fill} /dev/urandom > /workspace/fill`);
  return id;
}

async function sh(who: Who, id: string, script: string): Promise<string> {
  const res = await post(who, `/v1/sandboxes/${id}/exec`, { command: ["sh", "-c", script], timeoutMs: 60_000 });
  const f = parseExecFrames(res.body);
  if (f.error || f.exit?.exitCode !== 0) throw new Error(`exec ${script}: ${res.body}`);
  return f.stdout;
}

describe("paused quotas at pause time", () => {
  it("a pause past pausedSandboxes is 429 team_quota naming the team; it keeps running; a freed slot admits it", async () => {
    const first = await running("alice");
    const second = await running("alice");
    expect((await post("alice", `/v1/sandboxes/${first}/pause`)).statusCode).toBe(200);

    const refused = await post("alice", `/v1/sandboxes/${second}/pause`);
    expect(refused.statusCode, refused.body).toBe(429);
    expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
    expect(refused.json().error).toMatchObject({
      code: "capacity",
      details: { reason: "team_quota", team: "agents", short: ["pausedSandboxes"] },
    });
    expect(refused.json().error.message).toContain("team agents is at its limit on paused sandboxes (1, 1 held)");
    expect(refused.json().error.message).toContain("tenancy.teams[agents].limits.pausedSandboxes");
    expect(await phase("alice", second)).toBe("Running");
    expect(rt.manager.admission.has(second)).toBe(true);

    await kill("alice", first);
    expect((await post("alice", `/v1/sandboxes/${second}/pause`)).statusCode).toBe(200);
    expect(await phase("alice", second)).toBe("Paused");
    await kill("alice", second);
  });

  it("a pause whose snapshot takes the team past pausedBytes is refused after the snapshot; the sandbox keeps running", async () => {
    const first = await running("bob", 200 * Ki);
    const second = await running("bob", 200 * Ki);
    const firstPause = await post("bob", `/v1/sandboxes/${first}/pause`);
    expect(firstPause.statusCode, firstPause.body).toBe(200);

    const refused = await post("bob", `/v1/sandboxes/${second}/pause`);
    expect(refused.statusCode, refused.body).toBe(429);
    expect(refused.json().error).toMatchObject({
      code: "capacity",
      details: { reason: "team_quota", team: "research", short: ["pausedBytes"] },
    });
    expect(refused.json().error.message).toMatch(/team research is at its limit on paused snapshot bytes \(600Ki, /);
    // the unwound pause left it running with its files, still holding its reservation
    expect(await phase("bob", second)).toBe("Running");
    expect(await sh("bob", second, "wc -c < /workspace/fill")).toBe(`${200 * Ki}\n`);
    expect(rt.manager.admission.has(second)).toBe(true);

    await kill("bob", first);
    expect((await post("bob", `/v1/sandboxes/${second}/pause`)).statusCode).toBe(200);
    await kill("bob", second);
  });

  it("a team without paused limits pauses as before", async () => {
    const other = await running("bob");
    const id = await running("bob");
    expect((await post("bob", `/v1/sandboxes/${other}/pause`)).statusCode).toBe(200);
    expect((await post("bob", `/v1/sandboxes/${id}/pause`)).statusCode).toBe(200);
    await kill("bob", other);
    await kill("bob", id);
  });
});
