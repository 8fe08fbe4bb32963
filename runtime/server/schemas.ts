// JSON Schemas for the HTTP API: fastify validates requests with them, and the OpenAPI
// document is built from the same objects, so the description cannot drift from the checks.

const stringMap = { type: "object", additionalProperties: { type: "string" } } as const;

export const idParams = {
  type: "object",
  required: ["id"],
  properties: { id: { type: "string", minLength: 1, maxLength: 253, description: "sandbox id" } },
} as const;

export const createBody = {
  type: "object",
  additionalProperties: false,
  properties: {
    profile: { type: "string", minLength: 1, maxLength: 63, description: "image profile from the catalog; default from config" },
    size: { type: "string", minLength: 1, maxLength: 63, description: "size class (nano, small, ...); default from config" },
    env: { ...stringMap, description: "environment for every command" },
    ttlSeconds: { type: "integer", minimum: 1, description: "hard time to live" },
    idleTimeoutSeconds: { type: "integer", minimum: 0, description: "reaped after this long without API calls; 0 = never" },
    clientKey: { type: "string", minLength: 1, maxLength: 128, description: "idempotency key: a retry with the same key returns the same sandbox" },
    metadata: { ...stringMap, description: "free-form labels" },
    autoPause: { type: "object", description: "automatic pause/wake policy: probes, pause, resume, timeout (docs/pause-resume.md); needs snapshots configured" },
  },
} as const;

export const waitBody = {
  type: ["object", "null"],
  additionalProperties: false,
  properties: { timeoutSeconds: { type: "number", exclusiveMinimum: 0, maximum: 3600, description: "default 60" } },
} as const;

export const execBody = {
  type: "object",
  additionalProperties: false,
  required: ["command"],
  properties: {
    command: { type: "array", minItems: 1, maxItems: 4096, items: { type: "string" }, description: "argv; no shell unless you run one" },
    env: stringMap,
    cwd: { type: "string", minLength: 1, maxLength: 4096 },
    stdin: { type: "string", contentEncoding: "base64", description: "base64 bytes written to stdin, then closed" },
    timeoutMs: { type: "integer", minimum: 1, maximum: 86_400_000, description: "kill the command after this long: exit 124, timedOut" },
  },
} as const;

export const filesQuery = {
  type: "object",
  additionalProperties: false,
  required: ["path"],
  properties: { path: { type: "string", minLength: 1, maxLength: 4096, pattern: "^/", description: "absolute path in the sandbox" } },
} as const;

export const logsQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    // query strings are strings: no type coercion anywhere, so a JSON body's 5 is never "5"
    follow: { type: "string", enum: ["true", "false", "1", "0"] },
    tailLines: { type: "string", pattern: "^[0-9]{1,6}$" },
  },
} as const;

export const transferQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    progress: {
      type: "string",
      enum: ["true", "false", "1", "0"],
      description: "true: answer with NDJSON progress frames (like Accept: application/x-ndjson); false: plain JSON whatever Accept says",
    },
  },
} as const;

export const sandboxSchema = {
  type: "object",
  required: ["id", "owner", "profile", "size", "phase", "ready", "createdAt", "expiresAt", "metadata"],
  properties: {
    id: { type: "string" },
    owner: { type: "string" },
    profile: { type: "string" },
    size: { type: "string" },
    phase: { type: "string", enum: ["Pending", "Running", "Pausing", "Paused", "Resuming", "Failed", "Succeeded", "Terminating"] },
    ready: { type: "boolean" },
    reason: { type: "string", description: "e.g. OOMKilled, Error, DeadlineExceeded" },
    message: { type: "string" },
    exitCode: { type: "integer" },
    createdAt: { type: "string", format: "date-time" },
    readyAt: { type: "string", format: "date-time" },
    expiresAt: { type: "string", format: "date-time" },
    lastActivityAt: { type: "string", format: "date-time" },
    warm: { type: "boolean" },
    node: { type: "string" },
    clientKey: { type: "string" },
    metadata: stringMap,
    cpuRequestMillis: { type: "integer" },
    memoryRequestBytes: { type: "integer" },
  },
} as const;

export const errorSchema = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      properties: {
        code: { type: "string", enum: ["validation", "unauthenticated", "not_found", "conflict", "capacity", "timeout", "upstream", "failed", "too_large", "internal"] },
        message: { type: "string" },
        details: { type: "object" },
      },
    },
  },
} as const;

export const execFrameSchema = {
  description: "one JSON object per line, written as produced",
  oneOf: [
    { type: "object", required: ["started"], properties: { started: { const: true } }, description: "first frame, sent as soon as the command runs" },
    { type: "object", required: ["stream", "data"], properties: { stream: { enum: ["stdout", "stderr"] }, data: { type: "string", contentEncoding: "base64" } } },
    {
      type: "object",
      required: ["exit"],
      properties: {
        exit: {
          type: "object",
          properties: { exitCode: { type: "integer" }, timedOut: { type: "boolean" }, oomKilled: { type: "boolean" }, durationMs: { type: "number" } },
        },
      },
    },
    { ...errorSchema, description: "the command could not finish (the stream ends after it)" },
  ],
} as const;

export const poolSchema = {
  type: "object",
  properties: {
    pools: {
      type: "array",
      items: {
        type: "object",
        properties: { profile: { type: "string" }, size: { type: "string" }, target: { type: "integer" }, ready: { type: "integer" }, starting: { type: "integer" } },
      },
    },
  },
} as const;

export const transferFrameSchema = {
  description: "one JSON object per line: progress frames (at most a few per second per path), then exactly one sandbox or error frame",
  oneOf: [
    {
      type: "object",
      required: ["progress"],
      properties: {
        progress: {
          type: "object",
          required: ["op", "path", "bytes"],
          properties: {
            op: { enum: ["pause", "resume"] },
            path: { type: "string", description: "the writable path, e.g. /workspace" },
            bytes: { type: "integer", description: "bytes of this path moved so far" },
            totalBytes: { type: "integer", description: "this path's size, when known (resume)" },
          },
        },
      },
    },
    { type: "object", required: ["sandbox"], properties: { sandbox: sandboxSchema }, description: "last frame: the operation succeeded" },
    { ...errorSchema, description: "last frame: the operation failed after bytes had moved" },
  ],
} as const;
