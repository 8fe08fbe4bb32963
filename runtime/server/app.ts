// The HTTP service's composition root: builds a fastify app from a Manager, a token store and a
// logger. No process wiring here (ports, signals, config files live in runtime/main.ts), so
// tests boot it and inject requests without a socket.
import type { Readable } from "node:stream";
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { Histogram, type Registry } from "prom-client";
import { LATENCY_BUCKETS } from "../core/metrics.ts";
import { CapacityError, HTTP_STATUS, SbxError, UnauthenticatedError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Manager } from "../core/types.ts";
import { buildOpenApi } from "./openapi.ts";
import { DEFAULT_LIMITS, sandboxRoutes, type RouteContext, type RouteDef, type ServerLimits } from "./routes.ts";

declare module "fastify" {
  interface FastifyRequest {
    owner: string;
  }
}

export interface Authenticator {
  authenticate(token: string | undefined): string | undefined;
}

export interface AppOptions {
  manager: Manager;
  tokens: Authenticator;
  logger: Logger;
  /** Prometheus registry served at /metrics (the Manager's) */
  metrics?: Registry;
  /** readiness: false while starting or draining */
  ready?: () => boolean;
  limits?: Partial<ServerLimits>;
  version?: string;
}

function bearer(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== "string") return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

/** fastify/ajv validation error -> "body.ttlSeconds: must be integer" naming the field. */
function validationMessage(err: FastifyError): { field: string; message: string } {
  const v = err.validation?.[0];
  const where = err.validationContext ?? "body";
  if (!v) return { field: where, message: err.message };
  const path = v.instancePath.replace(/^\//, "").replaceAll("/", ".");
  const params = v.params as Record<string, unknown>;
  if (v.keyword === "required") {
    const f = [where, path, params.missingProperty].filter(Boolean).join(".");
    return { field: f, message: `${f}: required field is missing` };
  }
  if (v.keyword === "additionalProperties") {
    const f = [where, path, params.additionalProperty].filter(Boolean).join(".");
    return { field: f, message: `${f}: unknown field; remove it (see GET /openapi.json)` };
  }
  const f = [where, path].filter(Boolean).join(".");
  return { field: f, message: `${f}: ${v.message ?? "invalid"}` };
}

function sendError(reply: FastifyReply, status: number, code: string, message: string, details?: Record<string, unknown>): FastifyReply {
  return reply.code(status).type("application/json").send({ error: { code, message, ...(details ? { details } : {}) } });
}

export function systemRoutes(opts: AppOptions, openapi: () => unknown): RouteDef[] {
  return [
    {
      method: "GET", url: "/healthz", operationId: "health", auth: false, summary: "Liveness: the process serves HTTP.",
      responses: { "200": { description: "ok" } },
      handler: async () => ({ ok: true }),
    },
    {
      method: "GET", url: "/readyz", operationId: "ready", auth: false, summary: "Readiness: started and not draining.",
      responses: { "200": { description: "ready" }, "503": { description: "starting or draining" } },
      handler: async (_c, _r, reply) => ((opts.ready?.() ?? true) ? { ready: true } : reply.code(503).send({ ready: false })),
    },
    {
      method: "GET", url: "/metrics", operationId: "metrics", auth: false, summary: "Prometheus metrics.",
      responses: { "200": { description: "Prometheus text format", contentType: "text/plain" } },
      handler: async (_c, _r, reply) => {
        if (!opts.metrics) return reply.type("text/plain").send("");
        return reply.type(opts.metrics.contentType).send(await opts.metrics.metrics());
      },
    },
    {
      method: "GET", url: "/openapi.json", operationId: "openapi", auth: false, summary: "This API's OpenAPI 3.1 description.",
      responses: { "200": { description: "OpenAPI document", schema: { type: "object" } } },
      handler: async () => openapi(),
    },
  ];
}

/** Request latency by route; one per registry even when several apps share it. */
function requestHistogram(registry: Registry): Histogram<"route" | "method" | "status"> {
  const name = "sbx_http_request_seconds";
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Histogram<"route" | "method" | "status">;
  return new Histogram({ name, help: "HTTP requests by route (streams: until the response ends), seconds", labelNames: ["route", "method", "status"], buckets: LATENCY_BUCKETS, registers: [registry] });
}

export function buildApp(opts: AppOptions): FastifyInstance {
  const limits: ServerLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const app = Fastify({
    loggerInstance: opts.logger as unknown as FastifyBaseLogger,
    bodyLimit: limits.jsonBodyBytes,
    // one structured line per request comes from our onResponse hook instead
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    // extra fields are errors, not silently dropped (a typo must not become a default), and
    // types are not coerced (a number where a string belongs is a 400, not a guess)
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
  });
  app.decorateRequest("owner", "");

  // tar uploads reach the handler as the raw stream; the handler enforces the size limit
  for (const type of ["application/x-tar", "application/octet-stream"]) {
    app.addContentTypeParser(type, (_req, payload, done) => done(null, payload as Readable));
  }

  const ctx: RouteContext = { manager: opts.manager, logger: opts.logger, limits };
  let doc: unknown;
  const routes = [...sandboxRoutes, ...systemRoutes(opts, () => doc)];
  doc = buildOpenApi(routes, { title: "sbx", version: opts.version ?? "0.1.0" });

  for (const r of routes) {
    app.route({
      method: r.method,
      url: r.url,
      schema: r.schema,
      onRequest: r.auth
        ? async (req) => {
            const owner = opts.tokens.authenticate(bearer(req));
            if (owner === undefined) throw new UnauthenticatedError();
            req.owner = owner;
          }
        : undefined,
      handler: (req, reply) => r.handler(ctx, req, reply),
    });
  }

  const httpSeconds = opts.metrics ? requestHistogram(opts.metrics) : undefined;
  app.addHook("onResponse", async (req, reply) => {
    const route = req.routeOptions.url ?? "unmatched";
    httpSeconds?.observe({ route, method: req.method, status: String(reply.statusCode) }, reply.elapsedTime / 1000);
    opts.logger.debug({ op: "http", method: req.method, route, status: reply.statusCode, owner: req.owner || undefined, ms: reply.elapsedTime }, "request");
  });

  app.setNotFoundHandler((req, reply) => sendError(reply, 404, "not_found", `no route ${req.method} ${req.url.split("?")[0]}; see GET /openapi.json`));

  app.setErrorHandler((err: FastifyError | SbxError | Error, req, reply) => {
    const log = opts.logger.child({ op: "http", route: req.routeOptions.url, owner: req.owner || undefined });
    if (err instanceof SbxError) {
      const status = HTTP_STATUS[err.code];
      if (status >= 500) log.warn({ err }, "request failed upstream");
      if (err instanceof CapacityError) reply.header("retry-after", String(err.retryAfterSeconds));
      if (err.code === "unauthenticated") reply.header("www-authenticate", 'Bearer realm="sbx"');
      return sendError(reply, status, err.code, err.message, err.details);
    }
    const fe = err as FastifyError;
    if (fe.validation) {
      const { field, message } = validationMessage(fe);
      return sendError(reply, 400, "validation", message, { field });
    }
    if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
      const code = fe.statusCode === 413 ? "too_large" : fe.statusCode === 404 ? "not_found" : "validation";
      return sendError(reply, fe.statusCode, code, fe.message);
    }
    log.error({ err }, "internal error");
    return sendError(reply, 500, "internal", "internal error; the service logged the details");
  });

  return app;
}
