// Streaming exec over HTTP: the response is NDJSON: {started: true} at once, then one frame per chunk of output as the
// command produces it ({stream, data: base64}), then one {exit: {...}} frame (or {error}).
// A client that goes away kills the command and everything it started.
import { PassThrough, type Readable } from "node:stream";
import { finished } from "node:stream/promises";
import type { FastifyReply, FastifyRequest } from "fastify";
import { SbxError, TooLargeError, ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { ExecRequest, ExecSession, Manager } from "../core/types.ts";

export interface ExecBody {
  command: string[];
  env?: Record<string, string>;
  cwd?: string;
  stdin?: string;
  timeoutMs?: number;
}

/**
 * The request body (already shape-checked by the route's schema) as an ExecRequest, with stdin
 * decoded: its base64 padding and decoded size are checked here, since only this wire carries
 * stdin as base64. The command, env, cwd and timeout are checked once, by Manager.exec
 * (core/execInput.ts). Everything refused is a 4xx naming the field.
 */
export function execRequestFrom(body: ExecBody, stdinLimitBytes: number): ExecRequest {
  const req: ExecRequest = { command: body.command, env: body.env, cwd: body.cwd, timeoutMs: body.timeoutMs };
  if (body.stdin !== undefined) {
    // Buffer.from skips what is not base64 instead of failing: check the framing first
    const unpadded = body.stdin.replace(/={1,2}$/, "");
    if (
      /[^A-Za-z0-9+/]/.test(unpadded) ||
      unpadded.length % 4 === 1 ||
      (unpadded.length !== body.stdin.length && body.stdin.length % 4 !== 0)
    ) {
      throw new ValidationError(
        "stdin",
        body.stdin,
        "must be base64 of the bytes (A-Z, a-z, 0-9, '+', '/', padded with '=' to a multiple of 4 characters)",
      );
    }
    const bytes = Buffer.from(body.stdin, "base64");
    if (bytes.length > stdinLimitBytes) throw new TooLargeError("stdin", stdinLimitBytes);
    req.stdin = bytes;
  }
  return req;
}

export async function streamExec(
  manager: Manager,
  owner: string,
  id: string,
  execReq: ExecRequest,
  request: FastifyRequest,
  reply: FastifyReply,
  logger: Logger,
): Promise<FastifyReply> {
  // Errors before the command starts (404, 409 failed, 400) are ordinary error responses.
  const session = await manager.exec(owner, id, execReq);
  const out = new PassThrough();
  // Node sends response headers with the first body bytes; a command that prints nothing for a
  // while would leave the client waiting for headers. The first frame says it started.
  out.write(`${JSON.stringify({ started: true })}\n`);
  let done = false;
  const abandoned = () => {
    if (done) return;
    done = true;
    logger.info({ sandbox: id, owner, op: "exec" }, "client went away; killing the command");
    // nobody reads any more: kill it, and let its remaining output drain into the void so
    // nothing waits on a reader that is gone
    session.kill();
    session.stdout.resume();
    session.stderr.resume();
  };
  reply.raw.on("close", abandoned);
  // the client may have gone while the command was starting, before this listener existed
  if (reply.raw.destroyed || request.raw.socket?.destroyed) abandoned();
  void pump(session, out, logger.child({ sandbox: id, owner, op: "exec" })).finally(() => (done = true));
  return reply.code(200).header("content-type", "application/x-ndjson").header("cache-control", "no-store").send(out);
}

async function pump(session: ExecSession, out: PassThrough, log: Logger): Promise<void> {
  // a response the client abandoned is destroyed: nothing to write, and no drain to wait for
  const frame = (obj: unknown) => out.destroyed || out.write(`${JSON.stringify(obj)}\n`);
  let paused = false;
  const forward = (stream: Readable, name: "stdout" | "stderr") => {
    stream.on("data", (chunk: Buffer | string) => {
      const ok = frame({ stream: name, data: Buffer.from(chunk).toString("base64") });
      // Backpressure: a slow client slows the command's output instead of growing memory.
      if (!ok && !paused) {
        paused = true;
        session.stdout.pause();
        session.stderr.pause();
        out.once("drain", () => {
          paused = false;
          session.stdout.resume();
          session.stderr.resume();
        });
      }
    });
    return finished(stream).catch((err) => log.warn({ err, stream: name }, "output stream ended with an error"));
  };
  try {
    const streams = Promise.all([forward(session.stdout, "stdout"), forward(session.stderr, "stderr")]);
    const result = await session.result;
    await streams;
    frame({ exit: result });
  } catch (err) {
    const code = err instanceof SbxError ? err.code : "internal";
    const message = err instanceof SbxError ? err.message : "internal error";
    if (!(err instanceof SbxError)) log.error({ err }, "exec failed");
    frame({ error: { code, message } });
  } finally {
    out.end();
  }
}
