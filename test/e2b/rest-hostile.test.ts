// Hostile input on the E2B REST routes, in the style of test/server/hostile*.ts: bad values
// generated from the routes' own schemas (runtime/server/e2b/schemas.ts) plus hand-written ones
// (unsupported features, broken encodings, body-level abuse), injected into the real app on the
// real local backend. Every one must get a 4xx in E2B's body {code, message} whose code equals the
// status and whose message names the field; never a 5xx; and nothing may be created.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectBody, createBody, listQuery, pauseBody, timeoutBody } from "../../runtime/server/e2b/schemas.ts";
import { createE2bSandbox, type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

interface Case {
  name: string;
  method: "GET" | "POST" | "DELETE";
  url: string;
  payload?: unknown;
  headers?: Record<string, string>;
  /** what the message must name */
  field: string;
}

const ID = "SANDBOX";
let rt: LocalRuntime;
let id: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" } });
  id = (await createE2bSandbox(rt)).id;
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

type Props = Record<string, { type?: string; maxLength?: number; maxProperties?: number; minimum?: number }>;

/** For each declared field: the JSON types it is not, null, and what its limits rule out. */
function badBodies(
  route: Omit<Case, "name" | "field" | "payload">,
  props: Props,
  valid: Record<string, unknown>,
): Case[] {
  const out: Case[] = [];
  for (const [field, s] of Object.entries(props)) {
    if (!s.type) continue; // the declared-only fields (network, ...) are hand-written below
    const wrong: [string, unknown][] = [
      ["null", null],
      ["an array", [1]],
      ...(s.type !== "string" ? ([["a string", "x"]] as [string, unknown][]) : []),
      ...(s.type !== "object" ? ([["an object", { a: 1 }]] as [string, unknown][]) : []),
      ...(s.type !== "boolean" && s.type !== "object" ? ([["a boolean", true]] as [string, unknown][]) : []),
      ...(s.type === "string" && s.maxLength
        ? ([["too long", "x".repeat(s.maxLength + 1)]] as [string, unknown][])
        : []),
      ...(s.type === "string" ? ([["a NUL byte", "a\u0000b"]] as [string, unknown][]) : []),
      ...(s.type === "integer"
        ? ([
            ["negative", -1],
            ["fractional", 1.5],
            ["huge", 1e300],
          ] as [string, unknown][])
        : []),
      ...(s.type === "object" && s.maxProperties
        ? ([
            [
              "too many entries",
              Object.fromEntries(Array.from({ length: s.maxProperties + 1 }, (_, i) => [`k${i}`, "v"])),
            ],
          ] as [string, unknown][])
        : []),
      ...(s.type === "object" ? ([["a non-string value", { k: 1 }]] as [string, unknown][]) : []),
    ];
    for (const [what, value] of wrong)
      out.push({
        ...route,
        name: `${route.method} ${route.url} ${field}: ${what}`,
        payload: { ...valid, [field]: value },
        field,
      });
  }
  out.push({
    ...route,
    name: `${route.method} ${route.url}: unknown field`,
    payload: { ...valid, tiemout: 5 },
    field: "tiemout",
  });
  out.push({ ...route, name: `${route.method} ${route.url}: body is an array`, payload: [valid], field: "body" });
  out.push({
    ...route,
    name: `${route.method} ${route.url}: body is a string`,
    payload: JSON.stringify("x"),
    field: "body",
  });
  out.push({ ...route, name: `${route.method} ${route.url}: broken JSON`, payload: "{", field: "body" });
  out.push({
    ...route,
    name: `${route.method} ${route.url}: wrong content-type`,
    payload: "x",
    headers: { "content-type": "text/plain" },
    // fastify parses text/plain as a string; the schema then refuses it by name
    field: "body",
  });
  return out;
}

function badQueries(url: string): Case[] {
  const props = listQuery.properties as Props;
  const out: Case[] = Object.entries(props).map(([field, s]) => ({
    name: `GET ${url} ${field}: too long`,
    method: "GET" as const,
    url: `${url}?${field}=${"x".repeat((s.maxLength ?? 64) + 1)}`,
    field,
  }));
  const bad: [string, string, string][] = [
    ["limit", "0", "limit"],
    ["limit", "-1", "limit"],
    ["limit", "abc", "limit"],
    ["limit", "1001", "limit"],
    ["order", "sideways", "order"],
    ["state", "running,sleeping", "state"],
    ["state", "killed", "state"],
    ["startedAfter", "yesterday", "startedAfter"],
    ["nextToken", "not-a-token", "nextToken"],
    ["nextToken", Buffer.from('{"a":1}').toString("base64url"), "nextToken"],
    ["metadata", encodeURIComponent("k=%E0%A4%A"), "metadata"],
    ["unknownParam", "1", "unknownParam"],
  ];
  for (const [k, v, field] of bad)
    out.push({ name: `GET ${url} ${k}=${v}`, method: "GET", url: `${url}?${k}=${v}`, field });
  return out;
}

function cases(): Case[] {
  const create = { method: "POST" as const, url: "/v2/sandboxes" };
  const connect = { method: "POST" as const, url: `/v2/sandboxes/${ID}/connect` };
  const timeout = { method: "POST" as const, url: `/sandboxes/${ID}/timeout` };
  const pause = { method: "POST" as const, url: `/sandboxes/${ID}/pause` };
  const hand: Case[] = [
    ...["network", "mcp", "volumeMounts", "iam"].map((f) => ({
      ...create,
      name: `create ${f}`,
      payload: { [f]: {} },
      field: f,
    })),
    {
      ...create,
      name: "create allow_internet_access true",
      payload: { allow_internet_access: true },
      field: "allow_internet_access",
    },
    {
      ...create,
      name: "create autoPauseMemory true",
      payload: { autoPause: true, autoPauseMemory: true },
      field: "autoPauseMemory",
    },
    {
      ...create,
      name: "create reserved metadata key",
      payload: { metadata: { "sbx.e2b.end": "x" } },
      field: "metadata.sbx.e2b.end",
    },
    {
      ...create,
      name: "create port exposure key",
      payload: { metadata: { "sbx.ports.8080": "{}" } },
      field: "metadata.sbx.ports.8080",
    },
    { ...create, name: "create bad metadata key", payload: { metadata: { "a b": "x" } }, field: "metadata.a b" },
    { ...create, name: "create bad env name", payload: { envVars: { "1X": "x" } }, field: "envVars.1X" },
    { ...create, name: "create timeout over the hard TTL", payload: { timeout: 10 ** 6 }, field: "timeout" },
    { ...create, name: "create unknown template", payload: { templateID: "nope" }, field: "templateID" },
    { ...create, name: "create autoResume unknown field", payload: { autoResume: { on: true } }, field: "autoResume" },
    { ...pause, name: "pause memory true", payload: { memory: true }, field: "memory" },
    { ...timeout, name: "timeout missing", payload: {}, field: "timeout" },
    { ...timeout, name: "timeout over the hard TTL", payload: { timeout: 10 ** 6 }, field: "timeout" },
    {
      method: "POST",
      url: `/sandboxes/${ID}/refreshes`,
      name: "refresh duration string",
      payload: { duration: "1" },
      field: "duration",
    },
    { method: "GET", url: `/sandboxes/${"x".repeat(254)}`, name: "id too long", field: "sandboxID" },
    { method: "GET", url: `/sandboxes/${ID}/metrics?start=yesterday`, name: "metrics start", field: "start" },
    { method: "GET", url: "/sandboxes/%E0%A4%A", name: "bad percent-encoding", field: "url" },
  ];
  return [
    ...badBodies(create, createBody.properties as Props, { templateID: "base" }),
    ...badBodies(connect, connectBody.properties as Props, {}),
    ...badBodies(timeout, timeoutBody.properties as Props, { timeout: 30 }),
    ...badBodies(pause, pauseBody.properties as Props, {}),
    ...badQueries("/v2/sandboxes"),
    ...badQueries("/sandboxes"),
    ...hand,
  ];
}

describe("hostile input on the E2B REST routes", () => {
  const all = cases();

  it("has a case per field and bad value, with unique names", () => {
    expect(all.length).toBeGreaterThanOrEqual(100);
    expect(new Set(all.map((c) => c.name)).size).toBe(all.length);
  });

  it.each(all.map((c) => [c.name, c] as const))("%s", async (_name, c) => {
    const raw = typeof c.payload === "string";
    const res = await rt.app.inject({
      method: c.method,
      url: c.url.replaceAll(ID, id),
      headers: {
        "x-api-key": TOKENS.alice,
        ...(c.payload !== undefined ? { "content-type": "application/json" } : {}),
        ...c.headers,
      },
      payload: c.payload === undefined ? undefined : raw ? (c.payload as string) : JSON.stringify(c.payload),
    });
    expect(res.statusCode, res.body).toBeGreaterThanOrEqual(400);
    expect(res.statusCode, res.body).toBeLessThan(500);
    const body = res.json();
    expect(body.code, res.body).toBe(res.statusCode);
    expect(body.message, res.body).toContain(c.field);
  });

  it("created nothing, and the sandbox and service still answer", async () => {
    const list = await rt.app.inject({ method: "GET", url: "/v2/sandboxes", headers: { "x-api-key": TOKENS.alice } });
    expect(list.json().map((s: { sandboxID: string }) => s.sandboxID)).toEqual([id]);
    const health = await rt.app.inject({ method: "GET", url: "/healthz" });
    expect(health.statusCode).toBe(200);
  });
});
