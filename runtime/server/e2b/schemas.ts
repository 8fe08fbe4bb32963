// JSON schemas of the E2B control-plane requests, as SDK 2.51 sends them (src/sandbox/sandboxApi.ts).
// Unknown fields are refused (a typo must not become a default). Fields the SDK can send for
// features sbx does not have (network policy, volumes, MCP, IAM, memory snapshots) are declared so
// the route can refuse them by name with the reason, instead of a bare "unknown field".
import { LIMITS } from "../../core/spec.ts";
import { PATTERNS } from "../schemas.ts";
import { LIST_LIMIT, RESERVED } from "./shape.ts";

const RESERVED_KEYS = Object.keys(RESERVED).length - 1; // less the prefix entry

const str = (maxLength: number, extra: Record<string, unknown> = {}) =>
  ({ type: "string", maxLength, pattern: PATTERNS.noNul, ...extra }) as const;

const stringMap = (maxProperties: number, maxValue: number) =>
  ({
    type: "object",
    maxProperties,
    propertyNames: { maxLength: 256 },
    additionalProperties: str(maxValue),
  }) as const;

export const sandboxParams = {
  type: "object",
  required: ["sandboxID"],
  properties: { sandboxID: str(253, { minLength: 1 }) },
} as const;

/** seconds; E2B's own ceiling is 24 h, ours is config.defaults.maxTtlSeconds (checked in the route) */
const timeout = { type: "integer", minimum: 0, maximum: 2_147_483 } as const;

export const createBody = {
  type: "object",
  additionalProperties: false,
  properties: {
    templateID: str(128, { minLength: 1 }),
    // our metadata limit less the keys the layer reserves (shape.ts RESERVED)
    metadata: stringMap(LIMITS.metadataEntries - RESERVED_KEYS, LIMITS.metadataValueChars),
    envVars: stringMap(LIMITS.envEntries, LIMITS.envBytes),
    timeout,
    autoPause: { type: "boolean" },
    autoPauseMemory: { type: "boolean" },
    autoResume: {
      type: "object",
      additionalProperties: false,
      properties: { enabled: { type: "boolean" } },
    },
    secure: { type: "boolean" },
    allow_internet_access: { type: "boolean" },
    // not supported: accepted by the schema only to be refused by name in the route
    network: {},
    mcp: {},
    volumeMounts: {},
    iam: {},
  },
} as const;

export const connectBody = {
  type: "object",
  additionalProperties: false,
  properties: { timeout, memory: { type: "boolean" } },
} as const;

export const timeoutBody = {
  type: "object",
  additionalProperties: false,
  required: ["timeout"],
  properties: { timeout },
} as const;

/** the legacy keep-alive: extends the end by `duration` seconds from now */
export const refreshBody = {
  type: "object",
  additionalProperties: false,
  properties: { duration: timeout },
} as const;

export const pauseBody = {
  type: "object",
  additionalProperties: false,
  properties: { memory: { type: "boolean" } },
} as const;

export const listQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    metadata: str(16_384),
    state: str(64),
    template: str(128),
    startedAfter: str(64),
    order: { type: "string", enum: ["asc", "desc"] },
    // query values are strings (the app does not coerce types): checked here, parsed in the route
    limit: str(4, { pattern: `^[1-9][0-9]{0,${String(LIST_LIMIT.max).length - 2}}$|^${LIST_LIMIT.max}$` }),
    nextToken: str(1024),
  },
} as const;

export const metricsQuery = {
  type: "object",
  additionalProperties: false,
  properties: { start: str(12, { pattern: "^[0-9]{1,12}$" }), end: str(12, { pattern: "^[0-9]{1,12}$" }) },
} as const;
