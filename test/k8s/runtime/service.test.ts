// The whole lifecycle through the control-plane service (real socket) and the `sbx` CLI, on
// the Kubernetes backend against the real control plane; and owner isolation: every route
// with another owner's id answers 404.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { Service } from "../../../runtime/server/service.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "./service-support.ts";

const repo = resolve(import.meta.dirname, "../../..");
let t: TestService;
let backend: KubernetesBackend;
let service: Service;
let work: string;

function sbx(
  args: string[],
  token: string = TOKENS.alice,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, reject) => {
    const p = spawn(process.execPath, [join(repo, "bin/sbx.mjs"), ...args], {
      cwd: work,
      env: { ...process.env, SBX_SERVER: service.url, SBX_TOKEN: token },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (c) => (stdout += c));
    p.stderr.on("data", (c) => (stderr += c));
    p.on("error", reject);
    p.on("close", (code) => done({ code, stdout, stderr }));
  });
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-k8s-svc-"));
  t = await startTestService("rt-svc");
  ({ backend, service } = t);
}, 120_000);

afterAll(async () => {
  await t?.close();
});

describe("service and CLI on the Kubernetes backend", () => {
  it("runs the lifecycle through the CLI", async () => {
    const created = await sbx(["create", "--size", "nano", "--env", "WHO=k8s", "--json"]);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).id as string;
    const waited = await sbx(["wait", id, "--timeout", "60s"]);
    expect(waited.code, waited.stderr).toBe(0);
    expect(waited.stdout).toBe(`${id} ready\n`);
    const ran = await sbx(["run", id, "--", "sh", "-c", 'echo "hi $WHO"; echo oops >&2; exit 5']);
    expect(ran).toMatchObject({ code: 5, stdout: "hi k8s\n", stderr: "oops\n" });
    const timed = await sbx(["run", id, "--timeout", "1s", "--", "sleep", "30"]);
    expect(timed.code).toBe(124);

    mkdirSync(join(work, "in"), { recursive: true });
    writeFileSync(join(work, "in", "data.txt"), "over the service\n");
    expect((await sbx(["cp", join(work, "in"), `${id}:/workspace`])).code).toBe(0);
    expect((await sbx(["run", id, "--", "cat", "/workspace/in/data.txt"])).stdout).toBe("over the service\n");
    const down = await sbx(["cp", `${id}:/workspace/in`, join(work, "out")]);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(join(work, "out", "in", "data.txt"), "utf8")).toBe("over the service\n");

    expect(JSON.parse((await sbx(["ls", "--json"])).stdout).map((s: { id: string }) => s.id)).toContain(id);
    expect(JSON.parse((await sbx(["get", id, "--json"])).stdout)).toMatchObject({ id, phase: "Running", ready: true });
    const logs = await sbx(["logs", id]);
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout).toContain("sbx: sandbox started");

    // another owner sees nothing of it
    expect(JSON.parse((await sbx(["ls", "--json"], TOKENS.bob)).stdout)).toEqual([]);
    expect((await sbx(["get", id], TOKENS.bob)).code).toBe(4);

    expect((await sbx(["kill", id])).code).toBe(0);
    const gone = await sbx(["get", id]);
    expect(gone.code).toBe(4);
  }, 180_000);

  it("answers 404 on every route for another owner's sandbox", async () => {
    const res = await fetch(`${service.url}/v1/sandboxes`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKENS.alice}`, "content-type": "application/json" },
      body: JSON.stringify({ size: "nano" }),
    });
    expect(res.status).toBeLessThan(300);
    const { id } = (await res.json()) as { id: string };
    await backend.awaitReady(id, { timeoutMs: 60_000 });
    const bob = { authorization: `Bearer ${TOKENS.bob}` };
    const routes: [string, string, RequestInit?][] = [
      ["GET", `/v1/sandboxes/${id}`],
      ["DELETE", `/v1/sandboxes/${id}`],
      [
        "POST",
        `/v1/sandboxes/${id}/wait`,
        { body: JSON.stringify({}), headers: { ...bob, "content-type": "application/json" } },
      ],
      [
        "POST",
        `/v1/sandboxes/${id}/exec`,
        { body: JSON.stringify({ command: ["true"] }), headers: { ...bob, "content-type": "application/json" } },
      ],
      ["GET", `/v1/sandboxes/${id}/files?path=/workspace`],
      [
        "PUT",
        `/v1/sandboxes/${id}/files?path=/workspace`,
        { body: new Uint8Array(1024), headers: { ...bob, "content-type": "application/x-tar" } },
      ],
      ["GET", `/v1/sandboxes/${id}/logs`],
    ];
    for (const [method, url, init] of routes) {
      const r = await fetch(`${service.url}${url}`, { method, headers: bob, ...(init ?? {}) });
      expect(r.status, `${method} ${url}`).toBe(404);
    }
    expect((await backend.describe(id))?.ready).toBe(true); // untouched
    const del = await fetch(`${service.url}/v1/sandboxes/${id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${TOKENS.alice}` },
    });
    expect(del.status).toBeLessThan(300);
  }, 120_000);
});
