// GET /v1/usage (docs/tenancy.md): the caller's team's use against its limits; an owner listed
// in tenancy.admins gets every team. Its own file so the sandbox routes stay one table.
import type { FastifyRequest } from "fastify";
import type { UsageReport } from "../core/usage.ts";
import type { RouteDef } from "./routes.ts";

const use = {
  type: "object",
  properties: { sandboxes: { type: "integer" }, cpuMillis: { type: "integer" }, memoryBytes: { type: "integer" } },
};

export const usageSchema = {
  type: "object",
  required: ["team", "admin", "teams"],
  properties: {
    team: { type: "string", description: "the caller's team" },
    admin: { type: "boolean", description: "true: the caller sees every team (tenancy.admins)" },
    teams: {
      type: "array",
      items: {
        type: "object",
        required: ["team", "live", "paused", "limits", "rejectedHere"],
        properties: {
          team: { type: "string" },
          live: use,
          paused: { type: "object", properties: { sandboxes: { type: "integer" } } },
          limits: { type: "object", description: "hard limits; a missing key has no limit" },
          guarantee: {
            type: "object",
            properties: { cpuMillis: { type: "integer" }, memoryBytes: { type: "integer" } },
          },
          creates: {
            type: "object",
            properties: { perMinute: { type: "integer" }, burst: { type: "integer" }, tokensHere: { type: "number" } },
          },
          rejectedHere: { type: "object", description: "creates this replica refused the team, by reason" },
        },
      },
    },
  },
};

/** The Manager's usage report, when it has one (the SandboxManager does). */
interface UsageSource {
  usage?(owner: string, team?: string): UsageReport;
}

export const usageRoutes: RouteDef[] = [
  {
    method: "GET",
    url: "/v1/usage",
    operationId: "getUsage",
    auth: true,
    summary:
      "The caller's team: live sandboxes, CPU and memory against its limits, paused sandboxes, and its creates rate. Admins (tenancy.admins) get every team.",
    responses: { "200": { description: "usage by team", schema: usageSchema } },
    handler: async ({ manager }, req: FastifyRequest) => {
      const m = manager as UsageSource;
      if (!m.usage) return { team: "default", admin: false, teams: [] } satisfies UsageReport;
      return m.usage(req.owner, req.identity?.team);
    },
  },
];
