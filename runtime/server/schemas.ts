// JSON Schemas for the HTTP API: fastify validates requests with them, and the OpenAPI
// document is built from the same objects, so the description cannot drift from the checks.

import { HTTP_STATUS } from "../core/errors.ts";
import { EXEC_LIMITS } from "../core/execInput.ts";
import { LIMITS } from "../core/spec.ts";

// Patterns the message builder (requestErrors.ts) turns into a fix instead of echoing the regex.
export const PATTERNS = {
  noNul: "^[^\\u0000]*$",
  absolutePath: "^/[^\\u0000]*$",
  envName: "^[A-Za-z_][A-Za-z0-9_]*$",
  metadataKey: "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
  // the alphabet only: a simple class loop stays linear on a 5 MB string; padding is checked in code
  base64: "^[A-Za-z0-9+/]*={0,2}$",
  lines: "^[0-9]{1,6}$",
} as const;

export const PATTERN_FIXES: Record<string, string> = {
  [PATTERNS.noNul]: "must not contain NUL bytes (\\u0000); remove them",
  [PATTERNS.absolutePath]: "use an absolute path (starting with /) without NUL bytes, e.g. /workspace",
  [PATTERNS.envName]:
    "environment variable names are letters, digits and '_', not starting with a digit (no '=', not empty)",
  [PATTERNS.metadataKey]: "metadata keys are 1-63 letters, digits, '.', '_' or '-', starting and ending alphanumeric",
  [PATTERNS.base64]: "must be base64 (A-Z, a-z, 0-9, '+', '/', '=' padding)",
  [PATTERNS.lines]: "use a whole number of lines from 0 to 999999",
};

const text = (maxLength: number, extra: Record<string, unknown> = {}) =>
  ({ type: "string", maxLength, pattern: PATTERNS.noNul, ...extra }) as const;

const stringMap = { type: "object", additionalProperties: { type: "string" } } as const;

const envMap = (valueChars: number, description: string) =>
  ({
    type: "object",
    maxProperties: EXEC_LIMITS.envEntries,
    propertyNames: { pattern: PATTERNS.envName, maxLength: 256 },
    additionalProperties: text(valueChars),
    description,
  }) as const;

export const idParams = {
  type: "object",
  required: ["id"],
  properties: {
    id: { type: "string", minLength: 1, maxLength: 253, pattern: PATTERNS.noNul, description: "sandbox id" },
  },
} as const;

export const createBody = {
  type: "object",
  additionalProperties: false,
  properties: {
    profile: text(63, { minLength: 1, description: "image profile from the catalog; default from config" }),
    size: text(63, { minLength: 1, description: "size class (nano, small, ...); default from config" }),
    env: envMap(
      LIMITS.envBytes,
      `environment for every command: at most ${LIMITS.envEntries} entries and ${LIMITS.envBytes} bytes in all, no NUL bytes`,
    ),
    ttlSeconds: { type: "integer", minimum: 1, description: "hard time to live" },
    idleTimeoutSeconds: {
      type: "integer",
      minimum: 0,
      description: "reaped after this long without API calls; 0 = never",
    },
    clientKey: text(128, {
      minLength: 1,
      description: "idempotency key: a retry with the same key returns the same sandbox",
    }),
    metadata: {
      type: "object",
      maxProperties: LIMITS.metadataEntries,
      propertyNames: { pattern: PATTERNS.metadataKey },
      additionalProperties: text(LIMITS.metadataValueChars),
      description: `free-form labels: at most ${LIMITS.metadataEntries}, values of at most ${LIMITS.metadataValueChars} characters, no NUL bytes`,
    },
    autoPause: {
      type: "object",
      description:
        "automatic pause/wake policy: probes, pause, resume, timeout (docs/pause-resume.md); needs snapshots configured",
    },
  },
} as const;

// metadata is checked by the Manager when absent (a 400 naming it), so that an unknown field is
// reported by its own name rather than hidden behind "metadata is missing"
export const updateBody = {
  type: "object",
  additionalProperties: false,
  properties: {
    metadata: {
      type: "object",
      maxProperties: LIMITS.metadataEntries,
      propertyNames: { pattern: PATTERNS.metadataKey },
      additionalProperties: { type: ["string", "null"], maxLength: LIMITS.metadataValueChars, pattern: PATTERNS.noNul },
      description: `keys to set (a string) or remove (null); the result has at most ${LIMITS.metadataEntries} entries`,
    },
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
    command: {
      type: "array",
      minItems: 1,
      maxItems: EXEC_LIMITS.args,
      items: text(EXEC_LIMITS.argStringBytes),
      description: `argv; no shell unless you run one. No NUL bytes; each string at most ${EXEC_LIMITS.argStringBytes} bytes (the kernel's MAX_ARG_STRLEN), argv plus env at most ${EXEC_LIMITS.totalBytes} bytes`,
    },
    env: envMap(
      EXEC_LIMITS.argStringBytes,
      "environment for this command, over the sandbox's; counts toward the argv + env bound",
    ),
    cwd: {
      type: "string",
      minLength: 1,
      maxLength: EXEC_LIMITS.cwdChars,
      pattern: PATTERNS.absolutePath,
      description: "absolute directory in the sandbox; default /workspace",
    },
    stdin: {
      type: "string",
      contentEncoding: "base64",
      pattern: PATTERNS.base64,
      description: "base64 bytes written to stdin, then closed",
    },
    timeoutMs: {
      type: "integer",
      minimum: 1,
      maximum: 86_400_000,
      description: "kill the command after this long: exit 124, timedOut",
    },
  },
} as const;

export const filesQuery = {
  type: "object",
  additionalProperties: false,
  required: ["path"],
  properties: {
    path: {
      type: "string",
      minLength: 1,
      maxLength: 4096,
      pattern: PATTERNS.absolutePath,
      description: "absolute path in the sandbox",
    },
  },
} as const;

export const logsQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    // query strings are strings: no type coercion anywhere, so a JSON body's 5 is never "5"
    follow: { type: "string", enum: ["true", "false", "1", "0"] },
    tailLines: { type: "string", pattern: PATTERNS.lines },
  },
} as const;

export const transferQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    progress: {
      type: "string",
      enum: ["true", "false", "1", "0"],
      description:
        "true: answer with NDJSON progress frames (like Accept: application/x-ndjson); false: plain JSON whatever Accept says",
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
    phase: {
      type: "string",
      enum: ["Pending", "Running", "Pausing", "Paused", "Resuming", "Failed", "Succeeded", "Terminating"],
    },
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
    commandChannel: {
      type: "string",
      enum: ["helper", "exec"],
      description:
        "Kubernetes, once this replica ran a command there: helper = one long-lived channel to the in-sandbox helper; exec = one websocket exec per command (the helper cannot run in this pod; the reason is logged)",
    },
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
        code: {
          type: "string",
          enum: [...Object.keys(HTTP_STATUS), "internal"],
        },
        message: { type: "string" },
        details: {
          type: "object",
          description: "facts about the error, e.g. field and value (truncated) for validation",
        },
      },
    },
  },
} as const;

export const execFrameSchema = {
  description: "one JSON object per line, written as produced",
  oneOf: [
    {
      type: "object",
      required: ["started"],
      properties: { started: { const: true } },
      description: "first frame, sent as soon as the command runs",
    },
    {
      type: "object",
      required: ["stream", "data"],
      properties: { stream: { enum: ["stdout", "stderr"] }, data: { type: "string", contentEncoding: "base64" } },
    },
    {
      type: "object",
      required: ["exit"],
      properties: {
        exit: {
          type: "object",
          properties: {
            exitCode: { type: "integer" },
            timedOut: { type: "boolean" },
            oomKilled: { type: "boolean" },
            durationMs: { type: "number" },
          },
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
        properties: {
          profile: { type: "string" },
          size: { type: "string" },
          target: { type: "integer" },
          ready: { type: "integer" },
          starting: { type: "integer" },
        },
      },
    },
  },
} as const;

export const transferFrameSchema = {
  description:
    "one JSON object per line: progress frames (at most a few per second per path), then exactly one sandbox or error frame",
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
    {
      type: "object",
      required: ["sandbox"],
      properties: { sandbox: sandboxSchema },
      description: "last frame: the operation succeeded",
    },
    { ...errorSchema, description: "last frame: the operation failed after bytes had moved" },
  ],
} as const;
