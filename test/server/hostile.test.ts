// The hostile-input suite: hundreds of malformed requests, generated from the request schemas
// (hostile-cases.ts) plus the ones no schema states (hostile-handwritten.ts), against the real
// app on the real local backend with a live sandbox and a snapshot registry (so autoPause and
// pause are reachable). Every one must get a 4xx with our JSON error body naming the field; the
// service must answer /healthz after each; at the end nothing was created and the sandbox still
// runs commands and serves files.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";
import { generatedCases, type HostileCase, toJson } from "./hostile-cases.ts";
import { handwrittenCases } from "./hostile-handwritten.ts";

const ID = "SANDBOX-ID-PLACEHOLDER";
const cases = [...generatedCases(ID), ...handwrittenCases(ID)];

let registry: TestRegistry;
let rt: LocalRuntime;
let id: string;

beforeAll(async () => {
  registry = await startRegistry();
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" }, snapshots: { registry: registry.url } });
  const created = await rt.app.inject({
    method: "POST",
    url: "/v1/sandboxes",
    headers: auth("alice"),
    payload: { size: "nano" },
  });
  id = created.json().id;
  const ready = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/wait`,
    headers: auth("alice"),
    payload: { timeoutSeconds: 60 },
  });
  expect(ready.statusCode).toBe(200);
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await registry?.stop();
});

function send(c: HostileCase) {
  const raw = typeof c.payload === "string" || Buffer.isBuffer(c.payload);
  return rt.app.inject({
    method: c.method,
    url: c.url.replaceAll(ID, id),
    headers: {
      ...auth("alice"),
      ...(c.payload !== undefined && !raw ? { "content-type": "application/json" } : {}),
      ...c.headers,
    },
    payload: c.payload === undefined ? undefined : raw ? (c.payload as string | Buffer) : toJson(c.payload),
  });
}

describe("hostile input", () => {
  it("has at least 250 cases, with unique names", () => {
    expect(cases.length).toBeGreaterThanOrEqual(250);
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
  });

  it.each(cases)("$name", async (c) => {
    const res = await send(c);
    const where = `${c.method} ${c.url.slice(0, 120)} -> ${res.statusCode} ${res.body.slice(0, 400)}`;
    expect(res.statusCode, where).toBeGreaterThanOrEqual(400);
    expect(res.statusCode, where).toBeLessThan(500);
    expect(res.headers["content-type"], where).toMatch(/^application\/json/);
    const body = res.json();
    expect(body, where).toEqual({
      error: { code: expect.any(String), message: expect.any(String), details: expect.any(Object) },
    });
    expect(body.error.message, where).toContain(c.field);
    // a hostile value is never echoed back whole
    expect(res.body.length, where).toBeLessThan(4096);
    const health = await rt.app.inject({ method: "GET", url: "/healthz" });
    expect(health.statusCode).toBe(200);
  });

  it("created nothing, and the sandbox still runs commands and serves files", async () => {
    const list = await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") });
    expect(list.json().sandboxes.map((s: { id: string }) => s.id)).toEqual([id]);
    const exec = await rt.app.inject({
      method: "POST",
      url: `/v1/sandboxes/${id}/exec`,
      headers: auth("alice"),
      payload: { command: ["sh", "-c", "echo still-$((6*7))"], env: { A: "b" } },
    });
    expect(parseExecFrames(exec.body)).toMatchObject({ stdout: "still-42\n", exit: { exitCode: 0 } });
    const files = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${id}/files?path=/workspace`,
      headers: auth("alice"),
    });
    expect(files.statusCode).toBe(200);
    expect(
      (await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${id}`, headers: auth("alice") })).json(),
    ).toMatchObject({ phase: "Running", ready: true });
  });
});
