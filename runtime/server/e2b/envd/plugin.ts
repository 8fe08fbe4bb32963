// envd, served by the control plane: the E2B SDK's in-sandbox API (Connect RPC services
// process.Process and filesystem.Filesystem, plain-HTTP /files and /health) answered here and
// translated to Manager calls, so admission, audit, activity and auto-resume apply as for our
// own API, and no server runs inside the sandbox. The requests carry E2b-Sandbox-Id (or the
// 49983-<id>.<domain> host) and are authorised only by X-Access-Token (EnvdAccess).
//
// The Connect services run in @connectrpc/connect's router on connect-node's request/response
// bridge (rpcAdapter.ts): these routes hand it the raw
// request and response (reply.hijack) after the access check, with the caller as a context value.
import type { IncomingMessage } from "node:http";
import { createContextValues } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { HTTP_STATUS, SbxError } from "../../../core/errors.ts";
import { DEFAULT_DRAIN, settleRefusedBody } from "../../requestBody.ts";
import type { E2bDeps, EnvdCaller } from "../access.ts";
import { accessTokenFrom, sandboxIdFrom } from "./caller.ts";
import { CALLER, type EnvdServices } from "./context.ts";
import { downloadFile, type FilesQuery, uploadFiles } from "./filesHttp.ts";
import { filesystemService } from "./filesystemService.ts";
import { Filesystem } from "./gen/filesystem/filesystem_pb.ts";
import { Process } from "./gen/process/process_pb.ts";
import { processService } from "./processService.ts";
import { ProcessTable } from "./processTable.ts";
import type { ProcessRegistry } from "./registry.ts";
import { rpcAdapter } from "./rpcAdapter.ts";
import { DEFAULT_WATCH_LIMITS, WatcherSlots, type WatchLimits } from "./watchers.ts";

export interface EnvdOptions {
  /** the process table; by default the sandbox's own registry where it has one, else this replica's (processTable.ts) */
  registry?: ProcessRegistry;
  /** keepalive period of idle Start/Connect streams; the SDK asks for at least one per 50 s */
  keepaliveMs?: number;
  /** largest upload body (POST /files), bytes */
  uploadBytes?: number;
  /** WatchDir's polling interval and per-owner bounds (watchService.ts DEFAULT_WATCH_LIMITS) */
  watch?: Partial<WatchLimits>;
}

const DEFAULTS = { keepaliveMs: 20_000, uploadBytes: 512 * 1024 * 1024 };
/** unary and stream request messages (stdin chunks, paths): nothing the SDK sends comes near */
const RPC_READ_MAX_BYTES = 8 * 1024 * 1024;

const UNAUTHENTICATED =
  "missing or wrong X-Access-Token for this sandbox: send the envdAccessToken that create or connect returned";

/** E2B's body for envd's plain-HTTP routes: the SDK reads `message` (and maps the status). */
function e2bBody(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).type("application/json").send({ code: status, message });
}

// Over 60 lines on purpose: the envd routes in one fastify scope that shares its error handler and body parsing.
export function registerEnvd(app: FastifyInstance, deps: E2bDeps, opts: EnvdOptions = {}): void {
  const watch = { ...DEFAULT_WATCH_LIMITS, ...opts.watch };
  const services: EnvdServices = {
    manager: deps.manager,
    logger: deps.logger,
    registry: opts.registry ?? new ProcessTable(deps.manager),
    keepaliveMs: opts.keepaliveMs ?? DEFAULTS.keepaliveMs,
    watch,
    watchers: new WatcherSlots(watch.maxPerOwner),
  };
  const uploadBytes = opts.uploadBytes ?? DEFAULTS.uploadBytes;
  const log = deps.logger.child({ op: "envd" });
  const callers = new WeakMap<IncomingMessage, EnvdCaller>();
  const rpc = rpcAdapter({
    routes: (router) => {
      router.service(Process, processService(services));
      router.service(Filesystem, filesystemService(services));
    },
    contextValues: (req) => createContextValues().set(CALLER, callers.get(req)),
    readMaxBytes: RPC_READ_MAX_BYTES,
    logger: deps.logger,
  });

  /** The caller, or undefined for a missing sandbox and a wrong token alike (nothing leaks). */
  const authorize = async (req: FastifyRequest): Promise<EnvdCaller | undefined> => {
    const id = sandboxIdFrom(req.headers);
    if (!id) return undefined;
    return deps.access.resolve(id, accessTokenFrom(req.headers));
  };

  app.register(async (scope) => {
    // bodies stay unread here: Connect and the upload routes stream them themselves
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));

    scope.setErrorHandler(async (err, req, reply) => {
      await settleRefusedBody(req, reply, DEFAULT_DRAIN); // a refused upload: what the client still sends
      if (err instanceof SbxError) {
        const status = HTTP_STATUS[err.code];
        if (status >= 500) log.warn({ err, route: req.routeOptions.url }, "envd request failed upstream");
        return e2bBody(reply, status, err.message);
      }
      log.error({ err, route: req.routeOptions.url }, "envd request failed");
      return e2bBody(reply, 500, "internal error; the service logged the details");
    });

    const connectRoute = async (req: FastifyRequest, reply: FastifyReply) => {
      const caller = await authorize(req);
      if (!caller) {
        await settleRefusedBody(req, reply, DEFAULT_DRAIN);
        return reply.code(401).type("application/json").send({ code: "unauthenticated", message: UNAUTHENTICATED });
      }
      callers.set(req.raw, caller);
      reply.hijack();
      rpc(req.raw, reply.raw);
    };
    const rpcBody = { config: { maxBodyBytes: RPC_READ_MAX_BYTES } };
    scope.post("/process.Process/:method", rpcBody, connectRoute);
    scope.post("/filesystem.Filesystem/:method", rpcBody, connectRoute);

    scope.get("/files", async (req, reply) => {
      const caller = await authorize(req);
      if (!caller) return e2bBody(reply, 401, UNAUTHENTICATED);
      return downloadFile(services, caller, req.query as FilesQuery, reply);
    });
    scope.post("/files", { config: { maxBodyBytes: uploadBytes } }, async (req, reply) => {
      const caller = await authorize(req);
      if (!caller) {
        await settleRefusedBody(req, reply, DEFAULT_DRAIN);
        return e2bBody(reply, 401, UNAUTHENTICATED);
      }
      return uploadFiles(services, caller, req.query as FilesQuery, req, uploadBytes);
    });

    // 204 while the sandbox runs; 502 (the SDK's "not running") otherwise, and also for an
    // unknown sandbox or a wrong token, so isRunning() after kill() is false as on E2B and the
    // answer says nothing about which sandboxes exist
    scope.get("/health", async (req, reply) => {
      const caller = await authorize(req);
      const s = caller ? await deps.manager.get(caller.owner, caller.sandboxId).catch(() => undefined) : undefined;
      if (s?.phase === "Running") return reply.code(204).send();
      return e2bBody(reply, 502, "the sandbox is not running");
    });
  });
}
