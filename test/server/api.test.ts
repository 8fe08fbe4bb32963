// The service's request handling on the real local backend: auth, OpenAPI, validation 400s that
// name the field, 429 with Retry-After, limits. Boots the app in-process and injects requests.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../runtime/core/log.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { auth, type LocalRuntime, startLocalRuntime, testTokens } from "../support/local.ts";

let rt: LocalRuntime;
beforeAll(async () => {
  // room for exactly two nano sandboxes (100m each)
  rt = await startLocalRuntime({ budget: { cpu: "250m", memory: "4Gi" } }, { limits: { uploadBytes: 64 * 1024 } });
});
afterAll(async () => {
  await rt?.close();
});

const sandboxRoutes = () =>
  [
    { method: "POST", url: "/v1/sandboxes" },
    { method: "GET", url: "/v1/sandboxes" },
    { method: "GET", url: "/v1/sandboxes/sbx-x" },
    { method: "DELETE", url: "/v1/sandboxes/sbx-x" },
    { method: "POST", url: "/v1/sandboxes/sbx-x/wait" },
    { method: "POST", url: "/v1/sandboxes/sbx-x/exec" },
    { method: "PUT", url: "/v1/sandboxes/sbx-x/files?path=/workspace" },
    { method: "GET", url: "/v1/sandboxes/sbx-x/files?path=/workspace" },
    { method: "GET", url: "/v1/sandboxes/sbx-x/logs" },
    { method: "POST", url: "/v1/sandboxes/sbx-x/pause" },
    { method: "POST", url: "/v1/sandboxes/sbx-x/resume" },
    { method: "GET", url: "/v1/pool" },
  ] as const;

describe("authentication", () => {
  it.each([
    { name: "no header", headers: {} },
    { name: "wrong token", headers: { authorization: "Bearer token-mallory-0123456789" } },
    { name: "a prefix of a real token", headers: { authorization: "Bearer token-alice" } },
    { name: "not a bearer scheme", headers: { authorization: "Basic dG9rZW4tYWxpY2U=" } },
    { name: "empty bearer", headers: { authorization: "Bearer " } },
  ])("every /v1 route answers 401 with $name", async ({ headers }) => {
    for (const r of sandboxRoutes()) {
      const res = await rt.app.inject({ method: r.method, url: r.url, headers });
      expect(res.statusCode, `${r.method} ${r.url}`).toBe(401);
      expect(res.headers["www-authenticate"]).toBe('Bearer realm="sbx"');
      expect(res.json().error.code).toBe("unauthenticated");
    }
  });

  it.each(["/healthz", "/readyz", "/metrics", "/openapi.json"])("%s needs no token", async (url) => {
    const res = await rt.app.inject({ method: "GET", url });
    expect(res.statusCode).toBe(200);
  });
});

describe("OpenAPI", () => {
  it("is served and describes every route the app serves, and nothing else", async () => {
    const res = await rt.app.inject({ method: "GET", url: "/openapi.json" });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\./);
    const documented = new Set<string>();
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
      for (const m of Object.keys(ops)) documented.add(`${m.toUpperCase()} ${path}`);
    }
    // what fastify actually routes: printRoutes draws a tree; rebuild each full path from it.
    // Our API alone: the E2B layer's routes are E2B's (docs/e2b.md), and the console's are static
    // pages, not API (runtime/server/console.ts), so this app leaves both out.
    const ours = buildApp({
      manager: rt.manager,
      tokens: testTokens(),
      logger: silentLogger(),
      e2b: false,
      console: false,
    });
    await ours.ready();
    const tree = ours.printRoutes({ commonPrefix: false });
    await ours.close();
    const served = new Set<string>();
    const stack: string[] = [];
    for (const line of tree.split("\n")) {
      const at = line.indexOf("── ");
      if (at < 0) continue;
      const depth = Math.round((at - 1) / 4);
      const m = /^(\S+)(?: \(([^)]+)\))?/.exec(line.slice(at + 3))!;
      stack[depth] = (depth > 0 ? stack[depth - 1] : "") + m[1];
      stack.length = depth + 1;
      for (const method of m[2]?.split(", ") ?? [])
        if (method !== "HEAD") served.add(`${method} ${stack[depth].replace(/:([a-z]+)/g, "{$1}")}`);
    }
    expect([...served].sort()).toEqual([...documented].sort());
    expect(documented.size).toBeGreaterThanOrEqual(16);
    expect(doc.paths["/v1/sandboxes/{id}/exec"].post.responses["200"].content).toHaveProperty("application/x-ndjson");
    expect(doc.paths["/v1/sandboxes"].post.responses["429"]).toBeDefined();
  });
});

describe("validation", () => {
  it.each([
    {
      name: "wrong type",
      url: "/v1/sandboxes",
      body: { size: 5 },
      field: "body.size",
      msg: "body.size: invalid value 5: must be string",
    },
    {
      name: "unknown field",
      url: "/v1/sandboxes",
      body: { sizee: "nano" },
      field: "body.sizee",
      msg: "body.sizee: unknown field; remove it",
    },
    {
      name: "ttl not an integer",
      url: "/v1/sandboxes",
      body: { ttlSeconds: 1.5 },
      field: "body.ttlSeconds",
      msg: "body.ttlSeconds: invalid value 1.5: must be integer",
    },
    {
      name: "env value not a string",
      url: "/v1/sandboxes",
      body: { env: { A: 1 } },
      field: "body.env.A",
      msg: "body.env.A: invalid value 1: must be string",
    },
    {
      name: "ttl over the maximum",
      url: "/v1/sandboxes",
      body: { ttlSeconds: 999999 },
      field: "ttlSeconds",
      msg: "ttlSeconds: invalid value 999999: must be a whole number of seconds from 1 to 86400",
    },
    {
      name: "unknown profile",
      url: "/v1/sandboxes",
      body: { profile: "gpu" },
      field: "profile",
      msg: 'profile: invalid value "gpu": unknown profile; use one of: base',
    },
    {
      name: "unknown size",
      url: "/v1/sandboxes",
      body: { size: "huge" },
      field: "size",
      msg: "use one of: nano, small, medium, large",
    },
    {
      name: "bad env name",
      url: "/v1/sandboxes",
      body: { env: { "A-B": "x" } },
      field: "body.env.A-B",
      msg: 'body.env.A-B: invalid name "A-B": environment variable names are letters',
    },
    {
      name: "bad autoPause policy",
      url: "/v1/sandboxes",
      body: { autoPause: { probes: [{ name: "1bad", command: ["true"] }] } },
      field: "autoPause.probes[0].name",
      msg: "autoPause.probes[0].name: invalid value",
    },
    {
      name: "autoPause without pause support",
      url: "/v1/sandboxes",
      body: { autoPause: { pause: { afterInactivity: "10m" } } },
      field: "autoPause",
      msg: "this service cannot pause sandboxes: configure snapshots.registry",
    },
    {
      name: "exec without command",
      url: "/v1/sandboxes/sbx-x/exec",
      body: {},
      field: "body.command",
      msg: "body.command: required field is missing",
    },
    {
      name: "exec with empty command",
      url: "/v1/sandboxes/sbx-x/exec",
      body: { command: [] },
      field: "body.command",
      msg: "body.command: invalid value []: use at least 1 item",
    },
    {
      name: "exec timeout 0",
      url: "/v1/sandboxes/sbx-x/exec",
      body: { command: ["true"], timeoutMs: 0 },
      field: "body.timeoutMs",
      msg: "body.timeoutMs: invalid value 0: must be >= 1",
    },
    {
      name: "wait timeout negative",
      url: "/v1/sandboxes/sbx-x/wait",
      body: { timeoutSeconds: -1 },
      field: "body.timeoutSeconds",
      msg: "body.timeoutSeconds: invalid value -1: must be > 0",
    },
  ])("400 naming the field: $name", async ({ url, body, field, msg }) => {
    const res = await rt.app.inject({ method: "POST", url, headers: auth("alice"), payload: body });
    expect(res.statusCode).toBe(400);
    const err = res.json().error;
    expect(err.code).toBe("validation");
    expect(err.message).toContain(msg);
    expect(err.details.field).toBe(field);
  });

  it("files routes require an absolute path", async () => {
    const res = await rt.app.inject({
      method: "GET",
      url: "/v1/sandboxes/sbx-x/files?path=relative",
      headers: auth("alice"),
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toContain('querystring.path: invalid value "relative": use an absolute path');
    const missing = await rt.app.inject({ method: "GET", url: "/v1/sandboxes/sbx-x/files", headers: auth("alice") });
    expect(missing.json().error.message).toBe(
      "querystring.path: required field is missing; add it (see GET /openapi.json)",
    );
  });

  it("malformed JSON is a 400, an unknown route a 404 pointing at the API description", async () => {
    const bad = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: { ...auth("alice"), "content-type": "application/json" },
      payload: "{nope",
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe("validation");
    // (not /v2: that prefix is the E2B layer's, which answers in E2B's body)
    const nf = await rt.app.inject({ method: "GET", url: "/v3/things", headers: auth("alice") });
    expect(nf.statusCode).toBe(404);
    expect(nf.json().error.message).toContain("see GET /openapi.json");
  });

  it("a JSON body over the limit is 413", async () => {
    const res = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth("alice"),
      payload: { metadata: { a: "x".repeat(9 * 1024 * 1024) } },
    });
    expect(res.statusCode).toBe(413);
    expect(res.json().error.code).toBe("too_large");
  });

  it("an upload with a declared length over the limit is refused before reading (413)", async () => {
    const res = await rt.app.inject({
      method: "PUT",
      url: "/v1/sandboxes/sbx-x/files?path=/workspace",
      headers: { ...auth("alice"), "content-type": "application/x-tar" },
      payload: Buffer.alloc(100 * 1024),
    });
    expect(res.statusCode).toBe(413);
    expect(res.json().error.message).toBe(
      "body: larger than the limit of 65536 bytes (Content-Length declares 102400): send at most 65536 bytes (larger data: upload it as files, in parts) or raise the server's limit",
    );
  });
});

describe("admission over HTTP", () => {
  it("rejects creates over the budget with 429, a reason and Retry-After; kill frees the room", async () => {
    const created: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await rt.app.inject({
        method: "POST",
        url: "/v1/sandboxes",
        headers: auth("alice"),
        payload: { size: "nano" },
      });
      expect(res.statusCode).toBe(201);
      created.push(res.json().id);
    }
    const over = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth("bob"),
      payload: { size: "nano" },
    });
    expect(over.statusCode).toBe(429);
    expect(Number(over.headers["retry-after"])).toBeGreaterThan(0);
    expect(over.json().error).toMatchObject({ code: "capacity" });
    expect(over.json().error.message).toContain("short on cpu (requested 100m, free 50m of 250m)");

    const metrics = await rt.app.inject({ method: "GET", url: "/metrics" });
    expect(metrics.body).toMatch(/sbx_budget_used\{resource="cpu_millis"\} 200/);
    // one replica: its share is the whole budget
    expect(metrics.body).toMatch(/sbx_budget_total\{resource="cpu_millis"\} 250/);
    expect(metrics.body).toMatch(/sbx_budget_share\{resource="cpu_millis"\} 250/);
    expect(metrics.body).toMatch(/sbx_admission_rejects_total 1/);

    const kill = await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${created[0]}`, headers: auth("alice") });
    expect(kill.statusCode).toBe(204);
    const again = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth("bob"),
      payload: { size: "nano" },
    });
    expect(again.statusCode).toBe(201);
    await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${created[1]}`, headers: auth("alice") });
    await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${again.json().id}`, headers: auth("bob") });
    expect(rt.manager.admission.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });
});

describe("optional capabilities", () => {
  it("pool status and pause answer 409 naming what is missing when the backend lacks them", async () => {
    const pool = await rt.app.inject({ method: "GET", url: "/v1/pool", headers: auth("alice") });
    expect(pool.statusCode).toBe(409);
    expect(pool.json().error.message).toBe("pool status: the local backend has no warm pool");
    const s = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: {} });
    const pause = await rt.app.inject({
      method: "POST",
      url: `/v1/sandboxes/${s.json().id}/pause`,
      headers: auth("alice"),
    });
    expect(pause.statusCode).toBe(409);
    expect(pause.json().error.message).toContain("the local backend does not support pause");
    await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${s.json().id}`, headers: auth("alice") });
  });
});
