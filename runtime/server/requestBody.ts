// What happens to a request body the service does not read through, on every route:
// - a body declared (Content-Length) over the route's limit is refused in onRequest, before
//   any byte of it is read, and the connection is closed after the answer;
// - `Expect: 100-continue` is answered only when something starts reading the body, so a
//   refusal before that (401, 413, 404) never invites the client to send it;
// - a refused body that was asked for is read and dropped, bounded, then the connection is
//   closed if that was not enough. A keep-alive connection with a body still owed would take
//   the client's next request as the rest of that body and never answer it.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";
import { TooLargeError } from "../core/errors.ts";
import { drainRequest } from "./requestErrors.ts";

declare module "fastify" {
  interface FastifyContextConfig {
    /** the largest body this route takes, bytes, when it streams it itself (default: bodyLimit) */
    maxBodyBytes?: number;
  }
}

/** A refused body is read and dropped up to this much before answering (drainRequest's bounds). */
export interface DrainBounds {
  maxBytes: number;
  maxMs: number;
}

/**
 * The bounds every error handler uses: a refused body up to 64 MiB is read to its end so the
 * client can read the answer (a 10 MB exec); past that, or after 10 s, the connection goes.
 */
export const DEFAULT_DRAIN: DrainBounds = { maxBytes: 64 * 1024 * 1024, maxMs: 10_000 };

/** Requests whose `Expect: 100-continue` is not answered yet. */
const awaitingContinue = new WeakSet<IncomingMessage>();

/**
 * Takes over Node's `Expect: 100-continue` handling on `server`: the interim 100 goes out when
 * the body is first read (any consumer: a parser, a pipe, a relay), and never after a final
 * answer. Without a 100, Node closes the connection after the answer by itself.
 */
export function deferContinue(server: Server): void {
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    awaitingContinue.add(req);
    const read = req._read;
    req._read = function (this: IncomingMessage, size: number) {
      req._read = read;
      if (awaitingContinue.delete(req) && !res.headersSent && !res.writableEnded) res.writeContinue();
      return read.call(this, size);
    };
    server.emit("request", req, res);
  });
}

/** The declared Content-Length, or undefined (chunked, or none). */
export function declaredLength(req: IncomingMessage): number | undefined {
  const v = req.headers["content-length"];
  if (v === undefined || !/^\d+$/.test(v)) return undefined;
  return Number(v);
}

/** onRequest: refuses a body declared over the route's limit, before reading any of it. */
export async function refuseDeclaredOverLimit(req: FastifyRequest): Promise<void> {
  const declared = declaredLength(req.raw);
  if (declared === undefined) return;
  const limit = req.routeOptions.config?.maxBodyBytes ?? req.routeOptions.bodyLimit;
  if (limit !== undefined && declared > limit) throw new TooLargeError("body", limit, declared);
}

/**
 * Before a refusal is sent: what to do with the rest of the body. Nothing when it is all read,
 * or was never asked for (Expect pending); close the connection at once when it is declared
 * larger than the drain would read anyway; else read and drop it (bounded), so a client still
 * sending reads the answer instead of a reset, and close when that was not enough.
 */
export async function settleRefusedBody(req: FastifyRequest, reply: FastifyReply, drain: DrainBounds): Promise<void> {
  const raw = req.raw;
  if (raw.complete || awaitingContinue.has(raw)) return;
  const declared = declaredLength(raw);
  if ((declared !== undefined && declared > drain.maxBytes) || !(await drainRequest(req, drain)))
    reply.header("connection", "close");
}
