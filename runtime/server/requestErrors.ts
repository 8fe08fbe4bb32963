// Every way a request can be refused answers with the same JSON body, {error: {code, message,
// details}}, whose message names the field, the bad value and the fix: schema failures (ajv),
// fastify's own refusals (bad URL encoding, an over-long path parameter, an unparsable or
// oversized body) and the ones Node's HTTP parser makes before fastify sees a request
// (431 header overflow, a malformed request line), which get written to the socket directly.
import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { describeValue, detailValue, type ErrorCode } from "../core/errors.ts";
import { PATTERN_FIXES } from "./schemas.ts";

export interface ErrorBody {
  error: { code: ErrorCode | "internal"; message: string; details: Record<string, unknown> };
}

export function errorBody(
  code: ErrorBody["error"]["code"],
  message: string,
  details: Record<string, unknown> = {},
): ErrorBody {
  return { error: { code, message, details } };
}

export function sendError(
  reply: FastifyReply,
  status: number,
  code: ErrorBody["error"]["code"],
  message: string,
  details: Record<string, unknown> = {},
): FastifyReply {
  return reply
    .code(status)
    .type("application/json")
    .send(errorBody(code, message, details));
}

interface AjvError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
  data?: unknown;
  propertyName?: string;
}

const plural = (n: unknown, one: string) => `${n} ${one}${n === 1 ? "" : "s"}`;

/** What to do about one failed keyword, in words a caller can act on. */
function fixFor(v: AjvError): string {
  const p = v.params;
  switch (v.keyword) {
    case "type":
      return `must be ${Array.isArray(p.type) ? p.type.join(" or ") : String(p.type)}; send that JSON type`;
    case "maxLength":
      return `use at most ${plural(p.limit, "character")}`;
    case "minLength":
      return `use at least ${plural(p.limit, "character")}`;
    case "maxItems":
      return `use at most ${plural(p.limit, "item")}`;
    case "minItems":
      return `use at least ${plural(p.limit, "item")}`;
    case "maxProperties":
      return `use at most ${p.limit} ${p.limit === 1 ? "entry" : "entries"}`;
    case "minimum":
    case "maximum":
    case "exclusiveMinimum":
    case "exclusiveMaximum":
      return `must be ${p.comparison} ${p.limit}`;
    case "enum":
      return `use one of: ${(p.allowedValues as unknown[]).map((x) => JSON.stringify(x)).join(", ")}`;
    case "pattern":
      return PATTERN_FIXES[String(p.pattern)] ?? `must match the pattern ${String(p.pattern)}`;
    default:
      return v.message ?? "is invalid; see GET /openapi.json";
  }
}

/** fastify/ajv validation error -> field "body.env.A", message "body.env.A: invalid value ...: fix". */
export function validationFailure(err: FastifyError): { field: string; message: string; value?: unknown } {
  const v = err.validation?.[0] as AjvError | undefined;
  const where = err.validationContext ?? "body";
  if (!v) return { field: where, message: `${where}: ${err.message}` };
  const path = v.instancePath
    .replace(/^\//, "")
    .split("/")
    .filter(Boolean)
    .map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
  const join = (...parts: unknown[]) => [where, ...path, ...parts].filter((x) => x !== undefined && x !== "").join(".");
  if (v.keyword === "required") {
    const field = join(v.params.missingProperty);
    return { field, message: `${field}: required field is missing; add it (see GET /openapi.json)` };
  }
  if (v.keyword === "additionalProperties") {
    const field = join(v.params.additionalProperty);
    return { field, message: `${field}: unknown field; remove it (see GET /openapi.json)` };
  }
  if (v.propertyName !== undefined) {
    // a bad key of a map (env, metadata): the key itself is the bad value
    const field = join(v.propertyName);
    return {
      field,
      value: detailValue(v.propertyName),
      message: `${field}: invalid name ${describeValue(v.propertyName)}: ${fixFor(v)}`,
    };
  }
  const field = join();
  if (!("data" in v)) return { field, message: `${field}: invalid value: ${fixFor(v)}` };
  return {
    field,
    value: detailValue(v.data),
    message: `${field}: invalid value ${describeValue(v.data)}: ${fixFor(v)}`,
  };
}

/** fastify's own request errors (body parsing, media type, URL) -> status, code, message naming what to fix. */
export function frameworkFailure(
  err: FastifyError,
  req: FastifyRequest,
): { status: number; code: ErrorCode; message: string; details: Record<string, unknown> } | undefined {
  const ctype = JSON.stringify(req.headers["content-type"] ?? "");
  switch (err.code) {
    case "FST_ERR_CTP_INVALID_JSON_BODY":
      return {
        status: 400,
        code: "validation",
        message: "body: not valid JSON (or it has a __proto__/constructor key): send a JSON document, e.g. {}",
        details: { field: "body" },
      };
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return {
        status: 400,
        code: "validation",
        message:
          "body: empty although content-type is application/json: send a JSON document, e.g. {}, or drop the header",
        details: { field: "body" },
      };
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return {
        status: 415,
        code: "validation",
        message: `content-type: ${ctype} is not accepted here: send application/json (tar uploads: application/x-tar)`,
        details: { field: "content-type", value: req.headers["content-type"] },
      };
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return {
        status: 400,
        code: "validation",
        message: "content-length: does not match the body sent: send the body's exact length",
        details: { field: "content-length" },
      };
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return {
        status: 413,
        code: "too_large",
        message: `body: larger than the limit of ${req.routeOptions.bodyLimit} bytes: send less (stdin over a few MB belongs in a file upload)`,
        details: { field: "body", limitBytes: req.routeOptions.bodyLimit },
      };
    case "FST_ERR_BAD_URL":
      return {
        status: 400,
        code: "validation",
        message: `url: ${describeValue(req.url)} has bad percent-encoding: encode reserved bytes as %XX`,
        details: { field: "url" },
      };
    case "FST_ERR_MAX_PARAM_LENGTH":
      return {
        status: 414,
        code: "validation",
        message: `url: a path parameter is too long (${req.url.length} characters in the URL); sandbox ids have at most 253 characters`,
        details: { field: "params" },
      };
    default:
      return undefined;
  }
}

/** Error codes of Node's HTTP parser -> the status a client should see. */
function clientErrorStatus(err: NodeJS.ErrnoException): number {
  if (err.code === "HPE_HEADER_OVERFLOW") return 431;
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") return 408;
  return 400;
}

function clientErrorMessage(status: number): string {
  if (status === 431)
    return "headers: larger than the server's limit (16 KiB including the URL): send fewer or smaller headers and a shorter URL";
  if (status === 408) return "request: not received in time: send the whole request promptly";
  return "request: not valid HTTP/1.1 (request line, headers or chunked framing): send a well-formed request";
}

/**
 * Node's 'clientError': the request never became a fastify request, so the answer is written to
 * the socket by hand, then the connection is closed (the parser cannot resynchronise).
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const status = clientErrorStatus(err);
  const body = JSON.stringify(
    errorBody(status === 408 ? "timeout" : status === 431 ? "too_large" : "validation", clientErrorMessage(status), {
      parser: err.code ?? "unknown",
    }),
  );
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * Reads and drops what is left of a refused request's body before answering, so a client still
 * sending (e.g. a 10 MB exec) gets to read the answer instead of a reset. Bounded in bytes and
 * time: past either, the connection is dropped, which is all a client sending more deserves.
 */
export async function drainRequest(req: FastifyRequest, opts: { maxBytes: number; maxMs: number }): Promise<boolean> {
  const raw = req.raw;
  if (raw.complete || raw.destroyed || raw.readableEnded) return true;
  return new Promise<boolean>((resolve) => {
    let seen = 0;
    const done = (ok: boolean) => {
      clearTimeout(timer);
      raw.off("data", onData).off("end", onEnd).off("error", onFail).off("close", onFail);
      resolve(ok);
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > opts.maxBytes) done(false);
    };
    const onEnd = () => done(true);
    const onFail = () => done(raw.complete);
    const timer = setTimeout(() => done(false), opts.maxMs);
    raw.on("data", onData).on("end", onEnd).on("error", onFail).on("close", onFail);
    raw.resume();
  });
}
