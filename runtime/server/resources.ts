// Per-sandbox resource figures over /v1 (docs/resources.md): one sandbox's history, optionally cut
// to [start, end], and the newest sample of each of the caller's sandboxes (`sbx top`). Its own
// file so the sandbox routes stay one table; owner-scoped like every /v1 route.
import type { FastifyRequest } from "fastify";
import { ConflictError } from "../core/errors.ts";
import { resolveMetricsRange } from "../core/resources.ts";
import type { RouteDef } from "./routes.ts";
import * as S from "./schemas.ts";

const num = { type: "number" };
const limitsSchema = {
  type: "object",
  properties: { cpuCores: num, memoryBytes: num, pids: num, workspaceBytes: num },
};
const sampleSchema = {
  type: "object",
  required: ["at"],
  description: "a figure the platform could not read is absent; cpu* are absent on a sandbox's first sample",
  properties: {
    at: { type: "string", format: "date-time" },
    cpuCores: num,
    cpuPct: { type: "number", description: "of the CPU limit" },
    memoryBytes: { type: "number", description: "charged to the sandbox, page cache included" },
    memoryCacheBytes: num,
    memoryWorkingSetBytes: { type: "number", description: "usage minus inactive file cache" },
    memoryPct: { type: "number", description: "working set of the memory limit" },
    pids: num,
    workspaceUsedBytes: num,
  },
};

export const resourcesSchema = {
  type: "object",
  required: ["id", "intervalMs", "limits", "samples", "events"],
  properties: {
    id: { type: "string" },
    intervalMs: { type: "integer" },
    limits: limitsSchema,
    samples: { type: "array", items: sampleSchema },
    events: {
      type: "array",
      items: {
        type: "object",
        properties: { at: { type: "string" }, type: { type: "string" }, message: { type: "string" } },
      },
    },
  },
};

const rangeQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    start: { type: "string", maxLength: 40, description: "Unix seconds or an ISO 8601 time" },
    end: { type: "string", maxLength: 40, description: "Unix seconds or an ISO 8601 time" },
  },
} as const;

export const resourceRoutes: RouteDef[] = [
  {
    method: "GET",
    url: "/v1/sandboxes/:id/metrics",
    operationId: "sandboxMetrics",
    auth: true,
    summary:
      "The sandbox's CPU, memory, pids and /workspace figures, one sample per interval for the last hour (resources.historySeconds), optionally cut to [start, end].",
    schema: { params: S.idParams, querystring: rangeQuery },
    responses: { "200": { description: "its limits, samples (oldest first) and events", schema: resourcesSchema } },
    handler: async ({ manager }, req: FastifyRequest) => {
      const range = resolveMetricsRange(req.query as { start?: string; end?: string });
      if (!manager.resources) throw new ConflictError("metrics: this service does not sample sandbox resources");
      return manager.resources(req.owner, (req.params as { id: string }).id, range);
    },
  },
  {
    method: "GET",
    url: "/v1/resources",
    operationId: "listResources",
    auth: true,
    summary: "Each of the caller's sandboxes with its newest resource sample (paused and starting ones have none).",
    responses: {
      "200": {
        description: "one line per sandbox",
        schema: {
          type: "object",
          properties: {
            sandboxes: {
              type: "array",
              items: {
                type: "object",
                required: ["id", "phase", "limits"],
                properties: {
                  id: { type: "string" },
                  phase: { type: "string" },
                  limits: limitsSchema,
                  latest: sampleSchema,
                },
              },
            },
          },
        },
      },
    },
    handler: async ({ manager }, req: FastifyRequest) => {
      if (!manager.resourceLines) throw new ConflictError("metrics: this service does not sample sandbox resources");
      return { sandboxes: await manager.resourceLines(req.owner) };
    },
  },
];
