// The API that opens and closes a sandbox's ports to others: public, or with a per-port token
// (shown once, stored hashed). By default a port answers only its owner's token.
import type { FastifyRequest } from "fastify";
import { generateToken } from "../../core/tokens.ts";
import type { RouteDef } from "../routes.ts";
import * as S from "../schemas.ts";
import type { PortAccess } from "./access.ts";
import type { PortService } from "./service.ts";
import { portUrls, validatePort } from "./target.ts";

type P = { id: string; port: string };

const portParams = {
  type: "object",
  required: ["id", "port"],
  additionalProperties: false,
  properties: { ...S.idParams.properties, port: { type: "string", maxLength: 16, description: "TCP port 1-65535" } },
} as const;

const exposureSchema = {
  type: "object",
  properties: {
    port: { type: "integer" },
    public: { type: "boolean" },
    url: { type: "string", description: "path-form URL through this service" },
    hostUrl: { type: "string", description: "host-form URL, when the service has ports.domain" },
    token: { type: "string", description: "the per-port access token; shown only in the answer that made it" },
    exposedAt: { type: "string", format: "date-time" },
  },
} as const;

const exposeBody = {
  type: "object",
  additionalProperties: false,
  properties: {
    public: { type: "boolean", description: "true: anyone with the URL; false (default): a new per-port token" },
  },
} as const;

function baseUrl(req: FastifyRequest): string {
  return `${req.protocol}://${req.headers.host ?? "localhost"}`;
}

function shown(ports: PortService, req: FastifyRequest, id: string, port: number, a: PortAccess, token?: string) {
  return {
    port,
    public: a.public,
    ...portUrls(baseUrl(req), id, port, ports.domain),
    ...(token ? { token } : {}),
    exposedAt: a.exposedAt,
  };
}

// Over 60 lines on purpose: the ports route table, one short route each.
export function portRoutes(ports: PortService): RouteDef[] {
  return [
    {
      method: "GET",
      url: "/v1/sandboxes/:id/exposed-ports",
      operationId: "listExposedPorts",
      auth: true,
      summary: "The sandbox's ports opened to others (public or with a per-port token); tokens are never shown again.",
      schema: { params: S.idParams },
      responses: {
        "200": {
          description: "the exposures",
          schema: { type: "object", properties: { ports: { type: "array", items: exposureSchema } } },
        },
      },
      handler: async ({ manager }, req) => {
        const { id } = req.params as { id: string };
        await manager.get(req.owner, id);
        const all = await ports.access.list(id, req.owner);
        return {
          ports: Object.entries(all).map(([p, a]) => shown(ports, req, id, Number(p), a)),
        };
      },
    },
    {
      method: "PUT",
      url: "/v1/sandboxes/:id/exposed-ports/:port",
      operationId: "exposePort",
      auth: true,
      summary:
        "Open a port to others: public (no token), or with a new per-port access token, shown once in this answer. Replaces the port's previous access.",
      schema: { params: portParams, body: exposeBody },
      responses: { "200": { description: "the exposure, with its URLs", schema: exposureSchema } },
      handler: async ({ manager }, req) => {
        const p = req.params as P;
        const port = validatePort(p.port);
        const s = await manager.get(req.owner, p.id);
        const isPublic = (req.body as { public?: boolean } | undefined)?.public === true;
        const token = isPublic ? undefined : generateToken();
        const a = await ports.access.expose(p.id, port, s.owner, { public: isPublic, token }, ports.now());
        return shown(ports, req, p.id, port, a, token);
      },
    },
    {
      method: "DELETE",
      url: "/v1/sandboxes/:id/exposed-ports/:port",
      operationId: "closePort",
      auth: true,
      summary: "Close a port to others again: back to the owner's token only. Idempotent.",
      schema: { params: portParams },
      responses: {
        "200": {
          description: "closed",
          schema: { type: "object", properties: { port: { type: "integer" }, closed: { type: "boolean" } } },
        },
      },
      handler: async ({ manager }, req) => {
        const p = req.params as P;
        const port = validatePort(p.port);
        await manager.get(req.owner, p.id);
        return { port, closed: await ports.access.close(p.id, port, req.owner) };
      },
    },
  ];
}
