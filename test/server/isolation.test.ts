// Owner isolation: every route that takes a sandbox id answers another owner exactly as it
// answers a missing id (404), and leaves the sandbox untouched.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxRoutes } from "../../runtime/server/routes.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
let aliceId: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  const res = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: {} });
  aliceId = res.json().id;
  await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${aliceId}/wait`,
    headers: auth("alice"),
    payload: { timeoutSeconds: 30 },
  });
});
afterAll(async () => {
  await rt?.close();
});

/** A well-formed request for a route, so only ownership can make it fail. */
function requestFor(method: string, url: string, id: string) {
  const path = url.replace(":id", id);
  if (url.endsWith("/exec")) return { method, url: path, payload: { command: ["true"] } };
  if (url.endsWith("/wait")) return { method, url: path, payload: { timeoutSeconds: 1 } };
  if (method === "PATCH") return { method, url: path, payload: { metadata: { stage: "bob" } } };
  if (url.endsWith("/files") && method === "PUT")
    return {
      method,
      url: `${path}?path=/workspace`,
      payload: Buffer.alloc(1024),
      headers: { "content-type": "application/x-tar" },
    };
  if (url.endsWith("/files")) return { method, url: `${path}?path=/workspace` };
  return { method, url: path };
}

const idRoutes = sandboxRoutes.filter((r) => r.url.includes(":id"));

describe("owner isolation", () => {
  it("covers every route that takes an id", () => {
    expect(idRoutes.map((r) => `${r.method} ${r.url}`).sort()).toEqual([
      "DELETE /v1/sandboxes/:id",
      "GET /v1/sandboxes/:id",
      "GET /v1/sandboxes/:id/files",
      "GET /v1/sandboxes/:id/logs",
      "PATCH /v1/sandboxes/:id",
      "POST /v1/sandboxes/:id/exec",
      "POST /v1/sandboxes/:id/pause",
      "POST /v1/sandboxes/:id/resume",
      "POST /v1/sandboxes/:id/wait",
      "PUT /v1/sandboxes/:id/files",
    ]);
  });

  it.each(idRoutes.map((r) => [`${r.method} ${r.url}`, r] as const))(
    "%s with another owner's id answers 404 like a missing id",
    async (_name, r) => {
      const before = (
        await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${aliceId}`, headers: auth("alice") })
      ).json();
      const req = requestFor(r.method, r.url, aliceId);
      const res = await rt.app.inject({
        ...req,
        headers: { ...auth("bob"), ...(req as { headers?: object }).headers },
      } as never);
      expect(res.statusCode, res.body).toBe(404);
      const missing = requestFor(r.method, r.url, "sbx-missingmissing00");
      const res2 = await rt.app.inject({
        ...missing,
        headers: { ...auth("bob"), ...(missing as { headers?: object }).headers },
      } as never);
      expect(res2.statusCode).toBe(404);
      // same shape: nothing distinguishes "someone else's" from "does not exist" but the id
      expect(res.json().error.message.replace(aliceId, "ID")).toBe(
        res2.json().error.message.replace("sbx-missingmissing00", "ID"),
      );
      // alice's sandbox is untouched: still running, no activity recorded from bob's call
      const after = (
        await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${aliceId}`, headers: auth("alice") })
      ).json();
      expect(after.phase).toBe("Running");
      expect(after.id).toBe(before.id);
    },
  );

  it("lists only the caller's sandboxes, and alice can still use hers", async () => {
    const bobs = await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("bob") });
    expect(bobs.json().sandboxes.map((s: { id: string }) => s.id)).not.toContain(aliceId);
    const alices = await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") });
    expect(alices.json().sandboxes.map((s: { id: string }) => s.id)).toContain(aliceId);
    const run = await rt.app.inject({
      method: "POST",
      url: `/v1/sandboxes/${aliceId}/exec`,
      headers: auth("alice"),
      payload: { command: ["echo", "still mine"] },
    });
    expect(parseExecFrames(run.body).stdout).toBe("still mine\n");
  });
});
