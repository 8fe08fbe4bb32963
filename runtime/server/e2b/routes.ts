// The E2B control-plane routes (SDK 2.51's src/sandbox/sandboxApi.ts), each a thin call into the
// Lifecycle or the Manager. Paths are E2B's own; nothing here clashes with our /v1, /healthz,
// /readyz, /metrics or with envd's /files, /health and /<package>.<Service>/<Method>.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ConflictError, ValidationError } from "../../core/errors.ts";
import { resolveMetricsRange } from "../../core/resources.ts";
import { e2bError } from "./access.ts";
import type { CreateBody, E2bCaller, E2bManager, Lifecycle } from "./lifecycle.ts";
import {
  connectBody,
  createBody,
  listQuery,
  metricsQuery,
  pauseBody,
  refreshBody,
  sandboxParams,
  timeoutBody,
} from "./schemas.ts";
import { e2bState, type ListQuery, pageOf, resolveListFilter, toE2b, toE2bMetrics } from "./shape.ts";

declare module "fastify" {
  interface FastifyRequest {
    e2bCaller?: E2bCaller;
  }
}

export interface RouteDeps {
  manager: E2bManager;
  lifecycle: Lifecycle;
  domain?: string;
}

/** E2B API areas with no sbx counterpart */
export const NOT_SUPPORTED: [string, string][] = [
  ["/templates", "templates (build, list, delete)"],
  ["/snapshots", "memory snapshots"],
  ["/volumes", "volumes"],
  ["/volumecontent", "volumes"],
  ["/secrets", "secrets"],
];

const caller = (req: FastifyRequest): E2bCaller => req.e2bCaller as E2bCaller;
const idOf = (req: FastifyRequest): string => (req.params as { sandboxID: string }).sandboxID;

type RawListQuery = Omit<ListQuery, "limit"> & { limit?: string };

async function list(d: RouteDeps, req: FastifyRequest, reply: FastifyReply, defaultState?: string) {
  const q = req.query as RawListQuery;
  const filter = resolveListFilter({
    ...q,
    state: q.state ?? defaultState,
    limit: q.limit === undefined ? undefined : Number(q.limit),
  });
  const all = await d.manager.list({ owner: caller(req).owner });
  const page = pageOf(all, filter);
  if (page.nextToken) reply.header("x-next-token", page.nextToken);
  return page.items.map((s) => toE2b(s, d.domain));
}

// Over 60 lines on purpose: the E2B route table, one short route each, as SDK 2.51's sandboxApi.ts lists them.
export function registerRoutes(app: FastifyInstance, d: RouteDeps): void {
  const { lifecycle, manager } = d;

  app.post("/v2/sandboxes", { schema: { body: createBody } }, async (req, reply) =>
    reply.code(201).send(await lifecycle.create(caller(req), (req.body ?? {}) as CreateBody)),
  );

  app.post(
    "/v2/sandboxes/:sandboxID/connect",
    { schema: { params: sandboxParams, body: connectBody } },
    async (req, reply) => {
      const body = (req.body ?? {}) as { timeout?: number };
      const { resumed, ...handle } = await lifecycle.connect(caller(req), idOf(req), body.timeout);
      return reply.code(resumed ? 201 : 200).send(handle);
    },
  );

  // the legacy resume (SDK 1.x): connect by another name
  app.post(
    "/sandboxes/:sandboxID/resume",
    { schema: { params: sandboxParams, body: connectBody } },
    async (req, reply) => {
      const body = (req.body ?? {}) as { timeout?: number };
      const { resumed: _, ...handle } = await lifecycle.connect(caller(req), idOf(req), body.timeout);
      return reply.code(201).send(handle);
    },
  );

  app.get("/v2/sandboxes", { schema: { querystring: listQuery } }, (req, reply) => list(d, req, reply));
  // the v1 list shows running sandboxes unless asked otherwise
  app.get("/sandboxes", { schema: { querystring: listQuery } }, (req, reply) => list(d, req, reply, "running"));

  app.get("/sandboxes/:sandboxID", { schema: { params: sandboxParams } }, async (req) => {
    const s = await lifecycle.live(caller(req).owner, idOf(req));
    return toE2b(s, d.domain);
  });

  app.delete("/sandboxes/:sandboxID", { schema: { params: sandboxParams } }, async (req, reply) => {
    await manager.kill(caller(req).owner, idOf(req));
    return reply.code(204).send();
  });

  app.post(
    "/sandboxes/:sandboxID/timeout",
    { schema: { params: sandboxParams, body: timeoutBody } },
    async (req, reply) => {
      await lifecycle.setTimeout(caller(req).owner, idOf(req), (req.body as { timeout: number }).timeout);
      return reply.code(204).send();
    },
  );

  app.post(
    "/sandboxes/:sandboxID/refreshes",
    { schema: { params: sandboxParams, body: refreshBody } },
    async (req, reply) => {
      const seconds = (req.body as { duration?: number } | undefined)?.duration ?? 0;
      lifecycle.checkTimeout("duration", seconds);
      await lifecycle.refresh(caller(req).owner, idOf(req), seconds);
      return reply.code(204).send();
    },
  );

  app.post(
    "/sandboxes/:sandboxID/pause",
    { schema: { params: sandboxParams, body: pauseBody } },
    async (req, reply) => {
      const { owner } = caller(req);
      const id = idOf(req);
      if ((req.body as { memory?: boolean } | undefined)?.memory === true)
        throw new ValidationError(
          "memory",
          true,
          "sbx pauses keep the filesystem, not memory: pause with keepMemory: false",
        );
      const s = await lifecycle.live(owner, id);
      // the SDK's pause() returns false on 409: only "already paused" may answer it
      if (e2bState(s.phase) === "paused") return e2bError(reply, 409, `sandbox ${id} is already paused`);
      if (!manager.pause) return e2bError(reply, 501, "pause: this service cannot pause sandboxes");
      try {
        await manager.pause(owner, id);
      } catch (err) {
        if (err instanceof ConflictError && /does not support pause/.test(err.message))
          return e2bError(reply, 501, `${err.message} (configure snapshots.registry to enable pause)`);
        throw err;
      }
      return reply.code(204).send();
    },
  );

  // the Manager's resource history in E2B's shape; without a sampler, an empty series, not invented numbers
  app.get(
    "/sandboxes/:sandboxID/metrics",
    { schema: { params: sandboxParams, querystring: metricsQuery } },
    async (req) => {
      const owner = caller(req).owner;
      const id = idOf(req);
      await lifecycle.live(owner, id);
      const range = resolveMetricsRange(req.query as { start?: string; end?: string });
      if (!manager.resources) return [];
      try {
        return toE2bMetrics(await manager.resources(owner, id, range));
      } catch (err) {
        if (err instanceof ConflictError && err.message.startsWith("metrics:")) return [];
        throw err;
      }
    },
  );

  const unknown = (req: FastifyRequest, reply: FastifyReply) =>
    e2bError(
      reply,
      404,
      `no E2B route ${req.method} ${req.url.split("?")[0].slice(0, 200)}: sbx serves sandbox create/connect/list/info/kill/timeout/pause/metrics (see docs/e2b.md)`,
    );
  for (const url of ["/v2", "/v2/*", "/sandboxes/*"]) app.all(url, unknown);
  // E2B features sbx does not have: an E2B-shaped answer that says so, not a bare 404 the SDK prints as [object Object]
  for (const [prefix, what] of NOT_SUPPORTED)
    for (const url of [prefix, `${prefix}/*`])
      app.all(url, (_req, reply) => e2bError(reply, 404, `${what} are not supported by sbx (see docs/e2b.md)`));
}
