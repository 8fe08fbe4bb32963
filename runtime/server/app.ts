// The HTTP service's composition root: builds a fastify app from a Manager, a token store and a
// logger. No process wiring here (ports, signals, config files live in runtime/main.ts), so
// tests boot it and inject requests without a socket.
import type { Readable } from "node:stream";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyRequest,
  LogController,
} from "fastify";
import { Histogram, type Registry } from "prom-client";
import { type Authenticator, type Identity, identify } from "../auth/identities.ts";
import { systemClock } from "../core/clock.ts";
import { CapacityError, describeValue, HTTP_STATUS, SbxError, UnavailableError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { LATENCY_BUCKETS } from "../core/metrics.ts";
import type { Manager } from "../core/types.ts";
import { registerConsole } from "./console.ts";
import { e2bError } from "./e2b/access.ts";
import { isE2bRestPath } from "./e2b/errors.ts";
import { type E2bOptions, registerE2b } from "./e2b/plugin.ts";
import { buildOpenApi } from "./openapi.ts";
import { portRoutes } from "./ports/routes.ts";
import { type PortOptions, PortService } from "./ports/service.ts";
import { DEFAULT_DRAIN, deferContinue, refuseDeclaredOverLimit, settleRefusedBody } from "./requestBody.ts";
import { answerClientError, frameworkFailure, sendError, validationFailure } from "./requestErrors.ts";
import { resourceRoutes } from "./resources.ts";
import { DEFAULT_LIMITS, type RouteContext, type RouteDef, type ServerLimits, sandboxRoutes } from "./routes.ts";
import { type TerminalOptions, TerminalService, terminalRoutes } from "./terminal.ts";
import { usageRoutes } from "./usage.ts";

/** Path parameters longer than the id schema allows get the schema's 400 naming the field; far longer ones a 414. */
const MAX_PARAM_CHARS = 1024;

declare module "fastify" {
  interface FastifyRequest {
    owner: string;
    /** who the credential says the caller is (owner, team, issuer); null on routes without auth */
    identity: Identity | null;
  }
}

export type { Authenticator };

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
  /** traffic to sandbox ports (runtime/server/ports, docs/ports.md); false: none. Default: path form, in memory */
  ports?: PortOptions | false;
  /**
   * false: only /healthz, /readyz and /metrics (the controller role); every other path,
   * the sandbox API and /openapi.json included, is our 404. Default true.
   */
  api?: boolean;
  /** the E2B-compatible layer (runtime/server/e2b, docs/e2b.md) beside the API; false: off */
  e2b?: E2bOptions | false;
  /** the terminal websocket's bounds (runtime/server/terminal.ts) */
  terminals?: TerminalOptions;
  /** the web console's static pages at /console (runtime/server/console.ts); false: off. Default on */
  console?: false;
}

/** What a process without the API serves: probes and metrics. */
const PROBE_PATHS = new Set(["/healthz", "/readyz", "/metrics"]);

function bearer(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== "string") return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

export function systemRoutes(opts: AppOptions, openapi: () => unknown): RouteDef[] {
  return [
    {
      method: "GET",
      url: "/healthz",
      operationId: "health",
      auth: false,
      summary: "Liveness: the process serves HTTP.",
      responses: { "200": { description: "ok" } },
      handler: async () => ({ ok: true }),
    },
    {
      method: "GET",
      url: "/readyz",
      operationId: "ready",
      auth: false,
      summary: "Readiness: started and not draining.",
      responses: { "200": { description: "ready" }, "503": { description: "starting or draining" } },
      handler: async (_c, _r, reply) =>
        (opts.ready?.() ?? true) ? { ready: true } : reply.code(503).send({ ready: false }),
    },
    {
      method: "GET",
      url: "/metrics",
      operationId: "metrics",
      auth: false,
      summary: "Prometheus metrics.",
      responses: { "200": { description: "Prometheus text format", contentType: "text/plain" } },
      handler: async (_c, _r, reply) => {
        if (!opts.metrics) return reply.type("text/plain").send("");
        return reply.type(opts.metrics.contentType).send(await opts.metrics.metrics());
      },
    },
    {
      method: "GET",
      url: "/openapi.json",
      operationId: "openapi",
      auth: false,
      summary: "This API's OpenAPI 3.1 description.",
      responses: { "200": { description: "OpenAPI document", schema: { type: "object" } } },
      handler: async () => openapi(),
    },
    {
      method: "GET",
      url: "/v1/whoami",
      operationId: "whoami",
      auth: true,
      summary:
        "The owner and team the presented token maps to, and what established them (the tokens file or an issuer).",
      responses: { "200": { description: "the caller's identity", schema: identitySchema } },
      handler: async (_c, req) => req.identity,
    },
  ];
}

const identitySchema = {
  type: "object",
  required: ["owner", "via"],
  properties: {
    owner: { type: "string" },
    team: { type: "string" },
    via: { type: "string", description: '"token" (the tokens file) or the name of the issuer in config.auth.issuers' },
    expiresAt: { type: "string", format: "date-time" },
  },
};

/** Request latency by route; one per registry even when several apps share it. */
function requestHistogram(registry: Registry): Histogram<"route" | "method" | "status"> {
  const name = "sbx_http_request_seconds";
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Histogram<"route" | "method" | "status">;
  return new Histogram({
    name,
    help: "HTTP requests by route (streams: until the response ends), seconds",
    labelNames: ["route", "method", "status"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
}

// Over 60 lines on purpose: the composition root: fastify options, hooks and plugins in the order fastify applies
// them.
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
    // (verbose: errors carry the bad value, so messages can name it)
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false, verbose: true } },
    // the default, 100, answered ids of 101-253 characters (valid by the schema) with 414
    routerOptions: { maxParamLength: MAX_PARAM_CHARS },
    // bad percent-encoding and over-long parameters: our error body, not fastify's
    frameworkErrors: (err, req, reply) => {
      const f = frameworkFailure(err, req);
      if (f && isE2bRestPath(req.url)) return e2bError(reply, f.status, f.message);
      if (f) return sendError(reply, f.status, f.code, f.message, f.details);
      return sendError(reply, 500, "internal", "internal error; the service logged the details");
    },
    // before a request exists (malformed HTTP, 431 header overflow): written to the socket
    clientErrorHandler: answerClientError,
  });
  app.decorateRequest("owner", "");
  app.decorateRequest("identity", null);

  const ctx: RouteContext = { manager: opts.manager, logger: opts.logger, limits };
  let doc: unknown;
  const ports =
    opts.ports === false || opts.api === false
      ? undefined
      : new PortService(
          { manager: opts.manager, tokens: opts.tokens, logger: opts.logger, clock: systemClock },
          opts.ports,
        );
  ports?.register(app);
  // the terminal websocket (runtime/server/terminal.ts) beside the port relay's upgrades
  if (opts.api !== false)
    new TerminalService(
      {
        manager: opts.manager,
        tokens: opts.tokens,
        logger: opts.logger,
        clock: systemClock,
        claimedElsewhere: ports ? (req) => ports.targetOf(req) !== undefined : undefined,
      },
      opts.terminals,
    ).register(app);
  // after the port relay's hook, which hijacks relayed requests (their bodies are the sandbox's)
  deferContinue(app.server);
  app.addHook("onRequest", refuseDeclaredOverLimit);
  const routes =
    (opts.api ?? true)
      ? [
          ...sandboxRoutes,
          ...resourceRoutes,
          ...usageRoutes,
          ...terminalRoutes,
          ...(ports ? portRoutes(ports) : []),
          ...systemRoutes(opts, () => doc),
        ]
      : systemRoutes(opts, () => doc).filter((r) => PROBE_PATHS.has(r.url));

  // tar uploads reach the handler as the raw stream; the handler enforces the size limit. Only
  // routes that take a raw body get one: elsewhere a stream would meet the JSON schema.
  const rawBodyRoutes = new Set(routes.filter((r) => r.requestContentType).map((r) => `${r.method} ${r.url}`));
  for (const type of ["application/x-tar", "application/octet-stream"]) {
    app.addContentTypeParser(type, (req, payload, done) => {
      if (rawBodyRoutes.has(`${req.method} ${req.routeOptions.url}`)) return done(null, payload as Readable);
      done(
        Object.assign(new Error(`content-type ${type} is only for tar uploads`), {
          code: "FST_ERR_CTP_INVALID_MEDIA_TYPE",
          statusCode: 415,
        }) as FastifyError,
        undefined,
      );
    });
  }
  doc = buildOpenApi(routes, { title: "sbx", version: opts.version ?? "0.1.0" });
  // E2B's paths (/v2/sandboxes, /sandboxes/..., envd's) never meet ours; it has its own auth and error body
  if ((opts.api ?? true) && opts.e2b !== false)
    void registerE2b(app, { ...opts.e2b, manager: opts.manager, tokens: opts.tokens, logger: opts.logger });
  // the web console's static assets (runtime/server/console.ts); never on a preview host
  if ((opts.api ?? true) && opts.console !== false) registerConsole(app, { previewDomain: ports?.domain });

  for (const r of routes) {
    app.route({
      method: r.method,
      url: r.url,
      schema: r.schema,
      // a raw body (tar upload) is streamed by the handler, up to the upload limit
      config: r.requestContentType ? { maxBodyBytes: limits.uploadBytes } : {},
      onRequest: r.auth
        ? async (req) => {
            const who = await identify(opts.tokens, bearer(req));
            req.owner = who.owner;
            req.identity = who;
          }
        : undefined,
      handler: (req, reply) => r.handler(ctx, req, reply),
    });
  }

  const httpSeconds = opts.metrics ? requestHistogram(opts.metrics) : undefined;
  app.addHook("onResponse", async (req, reply) => {
    const route = req.routeOptions.url ?? "unmatched";
    httpSeconds?.observe({ route, method: req.method, status: String(reply.statusCode) }, reply.elapsedTime / 1000);
    opts.logger.debug(
      {
        op: "http",
        method: req.method,
        route,
        status: reply.statusCode,
        owner: req.owner || undefined,
        ms: reply.elapsedTime,
      },
      "request",
    );
  });

  app.setNotFoundHandler((req, reply) =>
    sendError(
      reply,
      404,
      "not_found",
      `no route ${req.method} ${describeValue(req.url.split("?")[0])}; see GET /openapi.json`,
      { method: req.method },
    ),
  );

  app.setErrorHandler(async (err: FastifyError | SbxError | Error, req, reply) => {
    // a client still sending the body must be able to read the refusal (requestBody.ts)
    await settleRefusedBody(req, reply, DEFAULT_DRAIN);
    const log = opts.logger.child({ op: "http", route: req.routeOptions.url, owner: req.owner || undefined });
    if (err instanceof SbxError) {
      const status = HTTP_STATUS[err.code];
      if (status >= 500) log.warn({ err }, "request failed upstream");
      if (err instanceof CapacityError || err instanceof UnavailableError)
        reply.header("retry-after", String(err.retryAfterSeconds));
      if (err.code === "unauthenticated") reply.header("www-authenticate", 'Bearer realm="sbx"');
      return sendError(reply, status, err.code, err.message, err.details);
    }
    const fe = err as FastifyError;
    if (fe.validation) {
      const { field, message, value } = validationFailure(fe);
      return sendError(reply, 400, "validation", message, value === undefined ? { field } : { field, value });
    }
    const known = frameworkFailure(fe, req);
    if (known) return sendError(reply, known.status, known.code, known.message, known.details);
    if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
      const code = fe.statusCode === 413 ? "too_large" : fe.statusCode === 404 ? "not_found" : "validation";
      return sendError(reply, fe.statusCode, code, `request: ${fe.message}`, { fastify: fe.code });
    }
    log.error({ err }, "internal error");
    return sendError(reply, 500, "internal", "internal error; the service logged the details");
  });

  return app;
}
