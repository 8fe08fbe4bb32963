// Our domain errors in Connect's error shape, as the E2B SDK maps them to its own errors
// (not_found -> NotFoundError / FileNotFoundError, invalid_argument -> InvalidArgumentError,
// resource_exhausted -> RateLimitError, ...). Anything that is not ours becomes `internal` with a
// fixed message: the details go to the log, never to the caller.
import { Code, ConnectError } from "@connectrpc/connect";
import { type ErrorCode, SbxError } from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";

const CONNECT_CODE: Record<ErrorCode, Code> = {
  validation: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  not_found: Code.NotFound,
  conflict: Code.FailedPrecondition,
  capacity: Code.ResourceExhausted,
  timeout: Code.DeadlineExceeded,
  upstream: Code.Unavailable,
  unavailable: Code.Unavailable,
  failed: Code.FailedPrecondition,
  // not resource_exhausted: the SDK would call an oversized request a rate limit
  too_large: Code.InvalidArgument,
};

export function toConnectError(err: unknown, log: Logger): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof SbxError) return new ConnectError(err.message, CONNECT_CODE[err.code]);
  log.error({ err }, "envd call failed");
  return new ConnectError("internal error; the service logged the details", Code.Internal);
}

/** Runs a unary handler body and answers any failure in Connect's shape. */
export async function guarded<T>(log: Logger, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toConnectError(err, log);
  }
}
