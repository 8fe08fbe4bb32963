// Teams over the real service on the real local backend: a team's limit answers 429 with
// Retry-After and a reason naming the limit and the team; GET /v1/usage shows the caller's team
// (every team for an admin); `sbx usage` prints it; /metrics has the per-team series.
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMMANDS } from "../../runtime/cli/commands.ts";
import { auth, type LocalRuntime, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
beforeAll(async () => {
  rt = await startLocalRuntime({
    budget: { cpu: "1", memory: "4Gi" },
    tenancy: {
      teams: [
        { name: "agents", members: ["alice"], limits: { sandboxes: 1, createsPerMinute: 30 } },
        { name: "platform", members: ["bob"], guarantee: { cpu: "200m", memory: "256Mi" } },
      ],
      admins: ["bob"],
    },
  });
});
afterAll(async () => {
  await rt?.close();
});

describe("teams over HTTP", () => {
  it("a team at its limit gets 429 team_quota naming the team, with Retry-After", async () => {
    const first = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: {} });
    expect(first.statusCode, first.body).toBe(201);
    const second = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: {} });
    expect(second.statusCode).toBe(429);
    expect(Number(second.headers["retry-after"])).toBeGreaterThan(0);
    expect(second.json().error).toMatchObject({
      code: "capacity",
      details: { reason: "team_quota", team: "agents", short: ["sandboxes"] },
    });
    expect(second.json().error.message).toContain("team agents is at its limit on live sandboxes (1)");
  });

  it("GET /v1/usage answers for the caller's team only", async () => {
    const res = await rt.app.inject({ method: "GET", url: "/v1/usage", headers: auth("alice") });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ team: "agents", admin: false });
    expect(body.teams.map((t: { team: string }) => t.team)).toEqual(["agents"]);
    expect(body.teams[0]).toMatchObject({
      live: { sandboxes: 1, cpuMillis: 100 },
      limits: { sandboxes: 1, createsPerMinute: 30 },
      creates: { perMinute: 30, burst: 30 },
      rejectedHere: { team_quota: 1 },
    });
  });

  it("an admin sees every team", async () => {
    const res = await rt.app.inject({ method: "GET", url: "/v1/usage", headers: auth("bob") });
    const body = res.json();
    expect(body).toMatchObject({ team: "platform", admin: true });
    expect(body.teams.map((t: { team: string }) => t.team)).toEqual(["agents", "default", "platform"]);
    expect(body.teams[2]).toMatchObject({ guarantee: { cpuMillis: 200, memoryBytes: 256 * 2 ** 20 } });
  });

  it("GET /v1/usage needs a token", async () => {
    expect((await rt.app.inject({ method: "GET", url: "/v1/usage" })).statusCode).toBe(401);
  });

  it("sbx usage prints the team against its limits", async () => {
    const stdout = new PassThrough();
    let out = "";
    stdout.on("data", (c: Buffer) => (out += c.toString()));
    const io = { stdout, stderr: new PassThrough(), stdin: new PassThrough() };
    const code = await COMMANDS.usage({ manager: rt.manager, owner: "alice", io }, []);
    expect(code).toBe(0);
    expect(out).toMatch(/^TEAM\s+LIVE\s+CPU\s+MEMORY/);
    expect(out).toMatch(/agents\s+1\/1\s+100m\s+128Mi\s+0\s+-\s+30\/min/);
    expect(out).toContain("team_quota=1");
  });

  it("/metrics has per-team gauges and rejects by reason", async () => {
    const text = (await rt.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(text).toContain('sbx_team_used{team="agents",resource="sandboxes"} 1');
    expect(text).toContain('sbx_team_limit{team="agents",resource="sandboxes"} 1');
    expect(text).toContain('sbx_team_limit{team="platform",resource="guarantee_cpu_millis"} 200');
    expect(text).toContain('sbx_team_rejects_total{team="agents",reason="team_quota"} 1');
  });
});
