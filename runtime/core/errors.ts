// The small set of domain errors. Mapped to HTTP statuses in one place (the service's
// error handler) and to CLI exit codes (the CLI). Every message names the field or object,
// the bad value, and the fix.

export type ErrorCode =
  | "validation" // 400
  | "unauthenticated" // 401
  | "not_found" // 404 (also: another owner's sandbox)
  | "conflict" // 409
  | "capacity" // 429 with Retry-After
  | "timeout" // 504
  | "upstream" // 502: the substrate failed transiently
  | "unavailable" // 503 with Retry-After: a path to the sandbox broke under the call; retrying opens a new one
  | "failed" // 409: the sandbox is terminal (OOMKilled, crashed)
  | "too_large"; // 413: a request body (tar upload, stdin) is over its limit

export class SbxError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;
  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "SbxError";
    this.code = code;
    this.details = details;
  }
}

/** Longest rendering of a bad value in an error: a hostile 8 MB argv must not come back (or go to the logs) whole. */
export const MAX_VALUE_CHARS = 120;

function renderJson(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined; // nested too deep for the stack, cycles, BigInt
  }
}

/** A bad value as JSON, cut to MAX_VALUE_CHARS with a marker that gives its full length. */
export function describeValue(value: unknown): string {
  if (value === undefined) return "undefined"; // a missing field: as messages always said it
  const json = renderJson(value);
  if (json === undefined) return `(a value of type ${typeof value} that cannot be shown)`;
  if (json.length <= MAX_VALUE_CHARS) return json;
  return `${json.slice(0, MAX_VALUE_CHARS)}...(${json.length} characters in all)`;
}

/** The value as details carry it: itself when small and renderable, else its truncated rendering. */
export function detailValue(value: unknown): unknown {
  if (value === undefined) return undefined;
  const json = renderJson(value);
  return json !== undefined && json.length <= MAX_VALUE_CHARS ? value : describeValue(value);
}

export class ValidationError extends SbxError {
  constructor(field: string, value: unknown, fix: string) {
    super("validation", `${field}: invalid value ${describeValue(value)}: ${fix}`, {
      field,
      value: detailValue(value),
    });
  }
}

export class NotFoundError extends SbxError {
  constructor(kind: string, id: string) {
    super("not_found", `${kind} ${JSON.stringify(id)} not found`, { kind, id });
  }
}

export class ConflictError extends SbxError {
  constructor(message: string, details: Record<string, unknown> = {}) {
    super("conflict", message, details);
  }
}

export class CapacityError extends SbxError {
  readonly retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds: number, details: Record<string, unknown> = {}) {
    super("capacity", message, { ...details, retryAfterSeconds });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export class TimeoutError extends SbxError {
  constructor(message: string) {
    super("timeout", message);
  }
}

export class UpstreamError extends SbxError {
  constructor(message: string, details: Record<string, unknown> = {}) {
    super("upstream", message, details);
  }
}

/**
 * The call met a path to the sandbox that broke under it (a command channel whose exec ended):
 * nothing is wrong with the request or the sandbox, and the same call after retryAfterSeconds
 * takes a new path. A 503 with Retry-After, so HTTP clients and proxies retry it on their own.
 */
export class UnavailableError extends SbxError {
  readonly retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds: number, details: Record<string, unknown> = {}) {
    super("unavailable", message, { ...details, retryable: true, retryAfterSeconds });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export class SandboxFailedError extends SbxError {
  constructor(id: string, reason: string, message?: string) {
    super("failed", `sandbox ${id} failed: ${reason}${message ? ` (${message})` : ""}`, { id, reason });
  }
}

export class TooLargeError extends SbxError {
  /** declaredBytes: what the request announced (Content-Length), when it was refused on that alone */
  constructor(field: string, limitBytes: number, declaredBytes?: number) {
    super(
      "too_large",
      declaredBytes === undefined
        ? `${field}: larger than the limit of ${limitBytes} bytes: send less or raise the server's limit`
        : `${field}: larger than the limit of ${limitBytes} bytes (Content-Length declares ${declaredBytes}): send at most ${limitBytes} bytes (larger data: upload it as files, in parts) or raise the server's limit`,
      declaredBytes === undefined ? { field, limitBytes } : { field, limitBytes, declaredBytes },
    );
  }
}

/** The 401 the service answers without a valid bearer token. */
export class UnauthenticatedError extends SbxError {
  constructor(message = "missing or invalid bearer token: send Authorization: Bearer <token> (SBX_TOKEN for the CLI)") {
    super("unauthenticated", message);
  }
}

export const HTTP_STATUS: Record<ErrorCode, number> = {
  validation: 400,
  unauthenticated: 401,
  not_found: 404,
  conflict: 409,
  capacity: 429,
  timeout: 504,
  upstream: 502,
  unavailable: 503,
  failed: 409,
  too_large: 413,
};

export const EXIT_CODE: Record<ErrorCode, number> = {
  validation: 2,
  unauthenticated: 3,
  not_found: 4,
  conflict: 5,
  capacity: 6,
  timeout: 7,
  upstream: 8,
  // the exit of a transient upstream failure: scripts that retry on 8 retry this too
  unavailable: 8,
  failed: 9,
  too_large: 10,
};
