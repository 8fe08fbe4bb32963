// Admission with teams, driven through its public calls: the three refusals with their reasons,
// teams and Retry-After; a Retry-After that, obeyed on an injected clock, is admitted; resumes
// and adopted sandboxes counted against their team; and config errors naming the key.
import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { resolveTenancy } from "../../runtime/config/tenancy.ts";
import { Admission, admissionOptionsFor } from "../../runtime/core/admission.ts";
import { CapacityError } from "../../runtime/core/errors.ts";
import { resumeAdmission } from "../../runtime/core/resumeAdmission.ts";
import type { Sandbox } from "../../runtime/core/types.ts";

const Mi = 2 ** 20;
const nano = { name: "nano", cpuRequestMillis: 100, memoryRequestBytes: 128 * Mi };

function refusal(f: () => unknown): CapacityError {
  try {
    f();
  } catch (err) {
    if (err instanceof CapacityError) return err;
    throw err;
  }
  throw new Error("admitted; expected a 429");
}

function admissionWith(teams: unknown[], budgetCpu = "2", now = { ms: 0 }): Admission {
  const config = validateRuntimeConfig({ budget: { cpu: budgetCpu, memory: "4Gi" }, tenancy: { teams } });
  return new Admission(config.budget, admissionOptionsFor(config, { nowMs: () => now.ms }));
}

describe("admission with teams", () => {
  it("team_quota names the team and the limit", () => {
    const adm = admissionWith([{ name: "a", members: ["alice"], limits: { sandboxes: 2 } }]);
    adm.admit({ id: "1", owner: "alice", size: nano });
    adm.admit({ id: "2", owner: "alice", size: nano });
    const e = refusal(() => adm.admit({ id: "3", owner: "alice", size: nano }));
    expect(e.details).toMatchObject({ reason: "team_quota", team: "a", short: ["sandboxes"] });
    expect(e.message).toContain("team a is at its limit on live sandboxes (2)");
    expect(e.retryAfterSeconds).toBeGreaterThan(0);
    // another team is not affected, and a release gives the room back to a
    adm.admit({ id: "4", owner: "bob", size: nano });
    adm.release("1");
    adm.admit({ id: "3", owner: "alice", size: nano });
  });

  it("global_budget keeps the room another team's unused guarantee needs", () => {
    // budget 1 cpu = 10 nanos; b is guaranteed 4 of them
    const adm = admissionWith(
      [
        { name: "a", members: ["alice"] },
        { name: "b", members: ["bob"], guarantee: { cpu: "400m", memory: "512Mi" } },
      ],
      "1",
    );
    for (let i = 0; i < 6; i++) adm.admit({ id: `a${i}`, owner: "alice", size: nano });
    const e = refusal(() => adm.admit({ id: "a6", owner: "alice", size: nano }));
    expect(e.details).toMatchObject({ reason: "global_budget", team: "a", short: ["cpu"] });
    // b gets all of its guarantee while a is at the slack's end
    for (let i = 0; i < 4; i++) adm.admit({ id: `b${i}`, owner: "bob", size: nano });
    expect(refusal(() => adm.admit({ id: "b4", owner: "bob", size: nano })).details.reason).toBe("global_budget");
  });

  it("team_rate: obeying Retry-After is admitted, and a second early is not", () => {
    const now = { ms: 1_000_000 };
    const adm = admissionWith(
      [{ name: "a", members: ["alice"], limits: { createsPerMinute: 6, createsBurst: 2 } }],
      "2",
      now,
    );
    adm.admit({ id: "1", owner: "alice", size: nano });
    adm.admit({ id: "2", owner: "alice", size: nano });
    for (let round = 0; round < 5; round++) {
      const e = refusal(() => adm.admit({ id: `x${round}`, owner: "alice", size: nano }));
      expect(e.details).toMatchObject({ reason: "team_rate", team: "a" });
      expect(e.message).toContain("over its rate of 6 creates per minute");
      const wait = e.retryAfterSeconds;
      expect(wait).toBeGreaterThan(0);
      expect(wait).toBeLessThanOrEqual(10);
      now.ms += wait * 1000 - 1000;
      if (wait > 1)
        expect(refusal(() => adm.admit({ id: `x${round}`, owner: "alice", size: nano })).details.reason).toBe(
          "team_rate",
        );
      now.ms += 1000;
      adm.admit({ id: `x${round}`, owner: "alice", size: nano });
      now.ms += 1234; // a caller arriving at an odd moment still gets an exact wait
    }
  });

  it("a resume takes a token and counts against its team like a create", async () => {
    const adm = admissionWith([{ name: "a", members: ["alice"], limits: { sandboxes: 1 } }]);
    adm.admit({ id: "1", owner: "alice", size: nano });
    const paused = {
      id: "2",
      owner: "alice",
      size: "nano",
      phase: "Paused",
      cpuRequestMillis: 0,
      memoryRequestBytes: 0,
    };
    const hooks = resumeAdmission("2", {
      admission: adm,
      sizeClasses: {
        nano: { ...nano, cpuLimitMillis: 1000, memoryLimitBytes: 512 * Mi, workspaceBytes: 1, tmpBytes: 1, pids: 1 },
      },
      owned: async () => paused as Sandbox,
    });
    await expect(hooks.before!()).rejects.toMatchObject({ details: { reason: "team_quota", team: "a" } });
  });

  it("an adopted sandbox (found after a restart) counts against its owner's team", () => {
    const adm = admissionWith([{ name: "a", members: ["alice"], limits: { sandboxes: 1 } }]);
    adm.adopt({ id: "old", owner: "alice", phase: "Running", cpuRequestMillis: 100, memoryRequestBytes: 128 * Mi });
    expect(refusal(() => adm.admit({ id: "new", owner: "alice", size: nano })).details.reason).toBe("team_quota");
    expect(adm.usage().teams?.find((t) => t.team === "a")?.used.sandboxes).toBe(1);
  });

  it("owners of no team share the default team, unlimited unless configured", () => {
    const adm = admissionWith([
      { name: "a", members: ["alice"] },
      { name: "default", limits: { sandboxes: 1 } },
    ]);
    adm.admit({ id: "1", owner: "stranger", size: nano });
    expect(refusal(() => adm.admit({ id: "2", owner: "another-stranger", size: nano })).details).toMatchObject({
      reason: "team_quota",
      team: "default",
    });
  });

  it("without teams admission answers as before (no team, no reason)", () => {
    const config = validateRuntimeConfig({ budget: { cpu: "100m", memory: "4Gi" } });
    const adm = new Admission(config.budget, admissionOptionsFor(config));
    adm.admit({ id: "1", owner: "x", size: nano });
    const e = refusal(() => adm.admit({ id: "2", owner: "x", size: nano }));
    expect(e.details.reason).toBeUndefined();
    expect(adm.usage().teams).toBeUndefined();
  });
});

describe("tenancy config", () => {
  const budget = { cpu: "4", memory: "8Gi" };
  it.each([
    {
      what: "a quota of -1",
      tenancy: { teams: [{ name: "a", limits: { sandboxes: -1 } }] },
      field: "config.tenancy.teams.0.limits.sandboxes",
      text: "a limit is a whole number >= 0",
    },
    {
      what: "a cpu quota of -1",
      tenancy: { teams: [{ name: "a", limits: { cpu: "-1" } }] },
      field: "config.tenancy.teams[0].limits.cpu",
      text: 'use cores ("2", "0.5")',
    },
    {
      what: "guarantees summing past the budget",
      tenancy: {
        teams: [
          { name: "a", guarantee: { cpu: "3", memory: "1Gi" } },
          { name: "b", guarantee: { cpu: "2", memory: "1Gi" } },
        ],
      },
      field: "config.tenancy.teams[*].guarantee.cpu",
      text: "the guarantees of a, b sum past the budget's cpu 4",
    },
    {
      what: "an owner in two teams",
      tenancy: {
        teams: [
          { name: "a", members: ["x"] },
          { name: "b", members: ["x"] },
        ],
      },
      field: "config.tenancy.teams[1].members",
      text: "already in team a",
    },
    {
      what: "a misspelt limit",
      tenancy: { teams: [{ name: "a", limits: { sandboxs: 3 } }] },
      field: "config.tenancy.teams.0.limits",
      text: "sandboxs",
    },
    {
      what: "a team name that is not a name",
      tenancy: { teams: [{ name: "Team A" }] },
      field: "config.tenancy.teams.0.name",
      text: "lower-case letters",
    },
    {
      what: "a default team that names no team",
      tenancy: { teams: [{ name: "agents" }], defaultTeam: "agnets" },
      field: "config.tenancy.defaultTeam",
      text: 'invalid value "agnets": names no team; configure a team of this name (agents configured)',
    },
    {
      what: "a burst without a rate",
      tenancy: { teams: [{ name: "a", limits: { createsBurst: 5 } }] },
      field: "config.tenancy.teams[0].limits.createsBurst",
      text: "set createsPerMinute too",
    },
  ])("$what is refused naming $field", ({ tenancy, field, text }) => {
    let err: unknown;
    try {
      validateRuntimeConfig({ budget, tenancy });
    } catch (e) {
      err = e;
    }
    expect((err as Error)?.message).toContain(field);
    expect((err as Error)?.message).toContain(text);
  });

  it("resolves members, quantities and the default team", () => {
    const t = resolveTenancy(
      {
        defaultTeam: "default",
        admins: ["root"],
        teams: [{ name: "a", members: ["alice"], limits: { cpu: "1500m", pausedBytes: "1Gi" } }],
      },
      { cpuMillis: 4000, memoryBytes: 8 * 1024 * Mi },
    );
    expect(t).toMatchObject({
      enabled: true,
      teamOf: { alice: "a" },
      teams: { a: { limits: { cpuMillis: 1500, pausedBytes: 1024 * Mi } } },
      admins: ["root"],
    });
  });
});
