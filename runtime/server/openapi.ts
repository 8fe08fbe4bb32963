// OpenAPI 3.1 document generated from the route table (the same schemas fastify validates with).
import type { ResponseDoc, RouteDef } from "./routes.ts";
import { errorSchema } from "./schemas.ts";

const ERROR_RESPONSES: Record<string, string> = {
  "400": "invalid request: the message names the field, the value and the fix",
  "401": "missing or invalid bearer token",
  "404": "no such sandbox for this owner (another owner's id answers the same)",
  "409": "conflict, or the sandbox failed (OOMKilled, crashed)",
  "413": "body over the limit (a refused body is read to its end first, so the client sees this answer)",
  "414": "a path parameter longer than 1024 characters",
  "415": "content-type not accepted by this route (JSON routes: application/json; uploads: application/x-tar)",
  "431": "headers (including the URL) over 16 KiB",
  "429": "over the admission budget; see Retry-After",
  "500": "internal error (details are logged, not returned)",
  "502": "the substrate failed transiently",
  "503": "a path to the sandbox broke under the call (error code unavailable); retry after Retry-After",
  "504": "timed out",
};

/** "/v1/sandboxes/:id/exec" -> "/v1/sandboxes/{id}/exec" */
export function openApiPath(url: string): string {
  return url.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
}

function response(doc: ResponseDoc): unknown {
  if (!doc.schema && !doc.contentType && !doc.alternatives) return { description: doc.description };
  const content: Record<string, unknown> = {
    [doc.contentType ?? "application/json"]: doc.schema ? { schema: doc.schema } : {},
  };
  for (const alt of doc.alternatives ?? []) content[alt.contentType] = alt.schema ? { schema: alt.schema } : {};
  return { description: doc.description, content };
}

function parameters(r: RouteDef): unknown[] {
  const out: unknown[] = [];
  const params = r.schema?.params as { properties?: Record<string, { description?: string }> } | undefined;
  for (const [name, schema] of Object.entries(params?.properties ?? {})) {
    out.push({ name, in: "path", required: true, schema, description: schema.description });
  }
  const q = r.schema?.querystring as { properties?: Record<string, unknown>; required?: string[] } | undefined;
  for (const [name, schema] of Object.entries(q?.properties ?? {})) {
    out.push({ name, in: "query", required: q?.required?.includes(name) ?? false, schema });
  }
  return out;
}

export function buildOpenApi(
  routes: readonly RouteDef[],
  info: { title: string; version: string },
): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const responses: Record<string, unknown> = {};
    for (const [code, doc] of Object.entries(r.responses)) responses[code] = response(doc);
    if (r.auth) {
      for (const [code, description] of Object.entries(ERROR_RESPONSES)) {
        responses[code] ??= {
          description,
          content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
        };
      }
    }
    const op: Record<string, unknown> = { operationId: r.operationId, summary: r.summary, responses };
    const ps = parameters(r);
    if (ps.length) op.parameters = ps;
    if (r.schema?.body)
      op.requestBody = {
        required: r.method !== "POST" || !r.url.endsWith("/wait"),
        content: { "application/json": { schema: r.schema.body } },
      };
    if (r.requestContentType)
      op.requestBody = {
        required: true,
        content: { [r.requestContentType]: { schema: { type: "string", format: "binary" } } },
      };
    op.security = r.auth ? [{ bearer: [] }] : [];
    const key = openApiPath(r.url);
    const item = paths[key] ?? {};
    item[r.method.toLowerCase()] = op;
    paths[key] = item;
  }
  return {
    openapi: "3.1.0",
    info: {
      ...info,
      description: "sbx control plane: create sandboxes, run code in them, move files, throw them away.",
    },
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "a token from the service's tokens file" },
      },
      schemas: { Error: errorSchema },
    },
    paths,
  };
}
