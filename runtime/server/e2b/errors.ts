// One error handler for the E2B routes: every refusal in E2B's body, {"code": <status>, "message"},
// because the SDK branches on that numeric code (404 -> kill() false, 409 -> pause() false) and
// maps 401/429/503 to its own error classes. Messages keep our rule: the field, the bad value, the
// fix, with our field names translated to the E2B ones the caller wrote.
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { CapacityError, HTTP_STATUS, SbxError, UnavailableError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { DEFAULT_DRAIN, settleRefusedBody } from "../requestBody.ts";
import { frameworkFailure, validationFailure } from "../requestErrors.ts";
import { e2bError } from "./access.ts";

/** our create fields -> the E2B names in the request the caller sent */
const FIELD_NAMES: [RegExp, string][] = [
  [/^profile\b/, "templateID"],
  [/^env\b/, "envVars"],
];

export function e2bFieldMessage(message: string): string {
  for (const [re, name] of FIELD_NAMES)
    if (re.test(message))
      return message.replace(re, name).replace("unknown profile", "unknown template (an sbx image profile)");
  return message;
}

/** E2B has no "sandbox failed": to its callers a crashed or OOM-killed sandbox is gone. */
function statusOf(err: SbxError): number {
  return err.code === "failed" ? 404 : HTTP_STATUS[err.code];
}

export function e2bErrorHandler(logger: Logger) {
  return async (err: FastifyError | Error, req: FastifyRequest, reply: FastifyReply) => {
    await settleRefusedBody(req, reply, DEFAULT_DRAIN);
    if (err instanceof SbxError) {
      const status = statusOf(err);
      if (status >= 500) logger.warn({ op: "e2b", route: req.routeOptions.url, err }, "request failed upstream");
      // the SDK retries a 429 only when Retry-After is a whole number of seconds
      if (err instanceof CapacityError || err instanceof UnavailableError)
        reply.header("retry-after", String(err.retryAfterSeconds));
      return e2bError(reply, status, e2bFieldMessage(err.message));
    }
    const fe = err as FastifyError;
    if (fe.validation) return e2bError(reply, 400, validationFailure(fe).message);
    const known = frameworkFailure(fe, req);
    if (known) return e2bError(reply, known.status, known.message);
    if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500)
      return e2bError(reply, fe.statusCode, `request: ${fe.message}`);
    logger.error({ op: "e2b", route: req.routeOptions.url, err }, "internal error");
    return e2bError(reply, 500, "internal error; the service logged the details");
  };
}

/** E2B's REST prefixes: the paths whose refusals, even fastify's own before routing, get E2B's body. */
const PREFIXES = ["/v2", "/sandboxes", "/templates", "/snapshots", "/volumes", "/volumecontent", "/secrets"];

export function isE2bRestPath(url: string): boolean {
  const path = url.split("?")[0] ?? "";
  return PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));
}
