// `sbx:tenancy` in stack config: refused before any resource exists when the runtime would refuse
// it (naming the stack key), and carried into the runtime's config.json as is (Pulumi mocks).
import { describe, expect, it } from "vitest";
import { validatePlatformConfig } from "../../infra/schema.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { deploy } from "../infra/deploy.ts";
import { one } from "../infra/mocks.ts";

const teams = [
  { name: "agents", members: ["ci-bot"], limits: { sandboxes: 100, cpu: "8", createsPerMinute: 600 } },
  { name: "research", members: ["alice"], guarantee: { cpu: "4", memory: "8Gi" } },
];

describe("sbx:tenancy", () => {
  it.each([
    {
      what: "a quota of -1",
      tenancy: { teams: [{ name: "a", limits: { sandboxes: -1 } }] },
      text: "sbx:tenancy.teams[0].limits.sandboxes: invalid value -1: a limit is a whole number >= 0",
    },
    {
      what: "guarantees summing over the budget",
      tenancy: {
        teams: [
          { name: "a", guarantee: { cpu: "10", memory: "1Gi" } },
          { name: "b", guarantee: { cpu: "7", memory: "1Gi" } },
        ],
      },
      text: 'sbx:tenancy.teams[*].guarantee.cpu: invalid value "17": the guarantees of a, b sum past the budget\'s cpu 16',
    },
    {
      what: "a default team that names no team",
      tenancy: { teams: [{ name: "agents" }], defaultTeam: "nobody" },
      text: 'sbx:tenancy.defaultTeam: invalid value "nobody": names no team',
    },
    {
      what: "an unknown key",
      tenancy: { teams: [], admin: ["x"] },
      text: "sbx:tenancy",
    },
    {
      what: "a team name that is not a name",
      tenancy: { teams: [{ name: "Research Team" }] },
      text: "sbx:tenancy.teams[0].name",
    },
  ])("refuses $what, naming the key", ({ tenancy, text }) => {
    expect(() => validatePlatformConfig({ tenancy })).toThrow(text);
  });

  it("is absent unless set, and validated with the runtime's own rules when set", () => {
    expect(validatePlatformConfig({}).tenancy).toBeUndefined();
    const c = validatePlatformConfig({ tenancy: { teams } });
    expect(c.tenancy?.teams.map((t) => t.name)).toEqual(["agents", "research"]);
  });

  it("reaches the runtime's config.json, which the runtime accepts", async () => {
    const run = await deploy("existing-cluster", { tenancy: { teams, admins: ["alice"] } });
    const cm = one(run.resources, "kubernetes:core/v1:ConfigMap", "configmap-sbx-config");
    const json = JSON.parse(cm.inputs.data["config.json"]);
    expect(json.tenancy).toMatchObject({ teams: [{ name: "agents" }, { name: "research" }], admins: ["alice"] });
    const runtime = validateRuntimeConfig(json);
    expect(runtime.tenancy.teamOf).toEqual({ "ci-bot": "agents", alice: "research" });
    expect(runtime.tenancy.teams.research.guarantee).toEqual({ cpuMillis: 4000, memoryBytes: 8 * 2 ** 30 });
  });
});
