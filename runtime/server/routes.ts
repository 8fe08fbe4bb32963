// The API's routes as one table: fastify registers them and the OpenAPI document is generated
// from the same entries, so every served route is described and nothing described is missing.
import { Readable } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ConflictError, ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { CreateRequest, Manager, MetadataPatch, Sandbox, TransferOptions } from "../core/types.ts";
import { type ExecBody, execRequestFrom, streamExec } from "./exec.ts";
import { limitUpload, sendArchive } from "./files.ts";
import { NDJSON, respondWithProgress, shouldStreamProgress } from "./progress.ts";
import { refuseReserved, visible } from "./reservedMetadata.ts";
import * as S from "./schemas.ts";

export interface RouteContext {
  manager: Manager;
  logger: Logger;
  limits: ServerLimits;
}

export interface ServerLimits {
  /** JSON request bodies (create, exec incl. base64 stdin) */
  jsonBodyBytes: number;
  /** tar uploads */
  uploadBytes: number;
  /** decoded exec stdin */
  stdinBytes: number;
  /** longest wait a client may ask for */
  maxWaitSeconds: number;
  /** streaming pause/resume: at most one progress frame per path this often (0 = every report) */
  progressIntervalMs: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  jsonBodyBytes: 8 * 1024 * 1024,
  uploadBytes: 512 * 1024 * 1024,
  stdinBytes: 4 * 1024 * 1024,
  maxWaitSeconds: 3600,
  progressIntervalMs: 250,
};

type Handler = (ctx: RouteContext, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

export interface ResponseDoc {
  description: string;
  contentType?: string;
  schema?: unknown;
  /** other representations of the same response, chosen by the request (Accept, a query flag) */
  alternatives?: { contentType: string; schema?: unknown }[];
}

export interface RouteDef {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  url: string;
  operationId: string;
  summary: string;
  auth: boolean;
  schema?: { body?: unknown; params?: unknown; querystring?: unknown };
  /** non-JSON request body (tar upload) */
  requestContentType?: string;
  responses: Record<string, ResponseDoc>;
  handler: Handler;
}

type P = { id: string };
const sandboxOut: ResponseDoc = { description: "the sandbox", schema: S.sandboxSchema };
const owner = (req: FastifyRequest) => req.owner;
const params = (req: FastifyRequest) => req.params as P;

const transferOut = (what: string): ResponseDoc => ({
  description: `the sandbox; with Accept: ${NDJSON} or ?progress=true, NDJSON frames reporting the ${what}'s progress, then the sandbox (or the error)`,
  schema: S.sandboxSchema,
  alternatives: [{ contentType: NDJSON, schema: S.transferFrameSchema }],
});

/** Plain JSON, or the progress stream when the request asks for it. */
function transfer(
  ctx: RouteContext,
  req: FastifyRequest,
  reply: FastifyReply,
  op: "pause" | "resume",
  run: (opts: TransferOptions) => Promise<Sandbox>,
): Promise<unknown> {
  if (!shouldStreamProgress(req.query as { progress?: string }, req.headers.accept)) return run({});
  const log = ctx.logger.child({ sandbox: params(req).id, owner: owner(req), op });
  return respondWithProgress(run, reply, { intervalMs: ctx.limits.progressIntervalMs, log });
}

/** Abort when the client goes away before we answered. */
function abortOnClose(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) ac.abort(new Error("client closed the connection"));
  });
  return ac.signal;
}

export const sandboxRoutes: RouteDef[] = [
  {
    method: "POST",
    url: "/v1/sandboxes",
    operationId: "createSandbox",
    auth: true,
    summary:
      "Create a sandbox. Returns at once (phase Pending) after admission; 429 with Retry-After when over budget.",
    schema: { body: S.createBody },
    responses: { "201": { description: "accepted", schema: S.sandboxSchema } },
    handler: async ({ manager }, req, reply) => {
      const body = (req.body ?? {}) as Omit<CreateRequest, "owner">;
      refuseReserved(body.metadata);
      const s = await manager.create({ ...body, owner: owner(req), team: req.identity?.team } as CreateRequest);
      return reply.code(201).send(visible(s));
    },
  },
  {
    method: "GET",
    url: "/v1/sandboxes",
    operationId: "listSandboxes",
    auth: true,
    summary: "List the caller's sandboxes.",
    responses: {
      "200": {
        description: "the caller's sandboxes",
        schema: { type: "object", properties: { sandboxes: { type: "array", items: S.sandboxSchema } } },
      },
    },
    handler: async ({ manager }, req) => ({ sandboxes: (await manager.list({ owner: owner(req) })).map(visible) }),
  },
  {
    method: "GET",
    url: "/v1/sandboxes/:id",
    operationId: "getSandbox",
    auth: true,
    summary: "Describe one sandbox (live state from the substrate).",
    schema: { params: S.idParams },
    responses: { "200": sandboxOut },
    handler: async ({ manager }, req) => visible(await manager.get(owner(req), params(req).id)),
  },
  {
    method: "PATCH",
    url: "/v1/sandboxes/:id",
    operationId: "updateSandbox",
    auth: true,
    summary: "Change a running sandbox's metadata: a string sets a key, null removes it (409 while paused).",
    schema: { params: S.idParams, body: S.updateBody },
    responses: { "200": sandboxOut },
    handler: async ({ manager }, req) => {
      const { metadata } = (req.body ?? {}) as { metadata: MetadataPatch };
      refuseReserved(metadata);
      if (!manager.updateMetadata) throw new ConflictError("this service cannot change metadata after create");
      return visible(await manager.updateMetadata(owner(req), params(req).id, metadata));
    },
  },
  {
    method: "DELETE",
    url: "/v1/sandboxes/:id",
    operationId: "killSandbox",
    auth: true,
    summary: "Kill a sandbox and everything in it; its capacity returns to admission.",
    schema: { params: S.idParams },
    responses: { "204": { description: "killed" } },
    handler: async ({ manager }, req, reply) => {
      await manager.kill(owner(req), params(req).id);
      return reply.code(204).send();
    },
  },
  {
    method: "POST",
    url: "/v1/sandboxes/:id/wait",
    operationId: "waitSandbox",
    auth: true,
    summary: "Block until the sandbox accepts exec; 409 failed when it became terminal, 504 on timeout.",
    schema: { params: S.idParams, body: S.waitBody },
    responses: { "200": sandboxOut },
    handler: async ({ manager, limits }, req, reply) => {
      const t = (req.body as { timeoutSeconds?: number } | null)?.timeoutSeconds ?? 60;
      const s = await manager.wait(owner(req), params(req).id, {
        timeoutMs: Math.min(t, limits.maxWaitSeconds) * 1000,
        signal: abortOnClose(reply),
      });
      return visible(s);
    },
  },
  {
    method: "POST",
    url: "/v1/sandboxes/:id/exec",
    operationId: "execSandbox",
    auth: true,
    summary: "Run a command; output streams back as NDJSON frames while it runs, then the exit frame.",
    schema: { params: S.idParams, body: S.execBody },
    responses: {
      "200": { description: "NDJSON frames", contentType: "application/x-ndjson", schema: S.execFrameSchema },
    },
    handler: async ({ manager, logger, limits }, req, reply) =>
      streamExec(
        manager,
        owner(req),
        params(req).id,
        execRequestFrom(req.body as ExecBody, limits.stdinBytes),
        req,
        reply,
        logger,
      ),
  },
  {
    method: "PUT",
    url: "/v1/sandboxes/:id/files",
    operationId: "putFiles",
    auth: true,
    summary: "Unpack a tar archive (the request body, streamed) into the directory `path` in the sandbox.",
    schema: { params: S.idParams, querystring: S.filesQuery },
    requestContentType: "application/x-tar",
    responses: { "204": { description: "unpacked" } },
    handler: async ({ manager, limits }, req, reply) => {
      // a JSON or text body was parsed instead of streamed: not an archive
      if (!(req.body instanceof Readable))
        throw new ValidationError(
          "content-type",
          req.headers["content-type"] ?? "",
          "send the archive as the body with content-type application/x-tar",
        );
      const { stream, check } = limitUpload(req.body, req.headers["content-length"], limits.uploadBytes);
      try {
        await manager.putArchive(owner(req), params(req).id, (req.query as { path: string }).path, stream);
      } catch (err) {
        throw check(err);
      }
      return reply.code(204).send();
    },
  },
  {
    method: "GET",
    url: "/v1/sandboxes/:id/files",
    operationId: "getFiles",
    auth: true,
    summary: "Stream the file or directory `path` out of the sandbox as a tar archive.",
    schema: { params: S.idParams, querystring: S.filesQuery },
    responses: {
      "200": {
        description:
          "tar archive; ends with the trailer `sbx-archive: complete`; a failure after the first byte cuts the response short",
        contentType: "application/x-tar",
      },
    },
    handler: async ({ manager }, req, reply) => {
      const tar = await manager.getArchive(owner(req), params(req).id, (req.query as { path: string }).path);
      return sendArchive(reply, tar);
    },
  },
  {
    method: "GET",
    url: "/v1/sandboxes/:id/logs",
    operationId: "sandboxLogs",
    auth: true,
    summary: "The sandbox's own output (its main process), optionally followed.",
    schema: { params: S.idParams, querystring: S.logsQuery },
    responses: { "200": { description: "log text", contentType: "text/plain" } },
    handler: async ({ manager }, req, reply) => {
      const q = req.query as { follow?: string; tailLines?: string };
      const follow = q.follow === "true" || q.follow === "1";
      const logs = await manager.logs(owner(req), params(req).id, {
        follow,
        tailLines: q.tailLines === undefined ? undefined : Number(q.tailLines),
      });
      if (!follow) return reply.type("text/plain; charset=utf-8").send(logs);
      // Following: send the headers now (Node would hold them until the first log line) and
      // stop reading the log when the client goes away.
      reply.hijack();
      reply.raw.writeHead(200, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      reply.raw.flushHeaders();
      reply.raw.on("close", () => logs.destroy());
      logs.on("error", () => reply.raw.destroy());
      logs.pipe(reply.raw);
      return reply;
    },
  },
  {
    method: "POST",
    url: "/v1/sandboxes/:id/pause",
    operationId: "pauseSandbox",
    auth: true,
    summary:
      "Snapshot the sandbox and release its compute (409 when the backend cannot pause). Progress streams as NDJSON on request.",
    schema: { params: S.idParams, querystring: S.transferQuery },
    responses: { "200": transferOut("pause") },
    handler: async (ctx, req, reply) => {
      const { manager } = ctx;
      if (!manager.pause) throw new ConflictError("pause is not supported by this service");
      return transfer(ctx, req, reply, "pause", async (opts) =>
        visible(await manager.pause!(owner(req), params(req).id, opts)),
      );
    },
  },
  {
    method: "POST",
    url: "/v1/sandboxes/:id/resume",
    operationId: "resumeSandbox",
    auth: true,
    summary:
      "Restore a paused sandbox (admission applies again: 429 when over budget). Progress streams as NDJSON on request.",
    schema: { params: S.idParams, querystring: S.transferQuery },
    responses: { "200": transferOut("resume") },
    handler: async (ctx, req, reply) => {
      const { manager } = ctx;
      if (!manager.resume) throw new ConflictError("resume is not supported by this service");
      return transfer(ctx, req, reply, "resume", async (opts) =>
        visible(await manager.resume!(owner(req), params(req).id, opts)),
      );
    },
  },
  {
    method: "GET",
    url: "/v1/pool",
    operationId: "poolStatus",
    auth: true,
    summary: "Warm pool state per (profile, size); 409 when the backend has no pool.",
    responses: { "200": { description: "pools", schema: S.poolSchema } },
    handler: async ({ manager }) => {
      if (!manager.poolStatus) throw new ConflictError("this service's backend has no warm pool");
      return { pools: await manager.poolStatus() };
    },
  },
];
