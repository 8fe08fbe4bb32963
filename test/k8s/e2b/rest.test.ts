// The E2B control-plane layer with the REAL e2b SDK on the Kubernetes backend, against the real
// control plane the suite starts, through startService (the wiring `npm start` uses, so the layer
// runs with e2bOptionsFor's options; its state is in the Sandbox resources). A smaller set than the local
// file (test/e2b/rest.test.ts): create/getInfo, metadata list, setTimeout, kill, keys, owners.
import { randomUUID } from "node:crypto";
import { finished } from "node:stream/promises";
import { AuthenticationError, Sandbox, SandboxNotFoundError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Service } from "../../../runtime/server/service.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "../runtime/service-support.ts";

let t: TestService;
let service: Service;

const sdk = (owner: keyof typeof TOKENS | "nobody" = "alice") => ({
  apiKey: owner === "nobody" ? "e2b_0000000000000000000000000000000000000000" : TOKENS[owner],
  apiUrl: service.url,
  sandboxUrl: service.url,
  requestTimeoutMs: 150_000,
});

beforeAll(async () => {
  t = await startTestService("e2b-rest");
  ({ service } = t);
}, 120_000);

afterAll(async () => {
  await t?.close();
});

async function sh(id: string, script: string): Promise<string> {
  const session = await service.manager.exec("alice", id, { command: ["sh", "-c", script] });
  let out = "";
  session.stdout.on("data", (b: Buffer) => (out += b.toString()));
  session.stderr.resume();
  const [r] = await Promise.all([session.result, finished(session.stdout), finished(session.stderr)]);
  if (r.exitCode !== 0) throw new Error(`${script} exited ${r.exitCode}`);
  return out;
}

describe("E2B REST with the real SDK (Kubernetes platform)", () => {
  const run = randomUUID();

  it("create, getInfo, list by metadata, setTimeout, kill true then false", async () => {
    const a = await Sandbox.create("base", {
      ...sdk(),
      timeoutMs: 120_000,
      metadata: { run, kind: "a" },
      envs: { GREETING: "hello k8s" },
    });
    const b = await Sandbox.create("base", { ...sdk(), metadata: { run, kind: "b" } });
    const info = await a.getInfo();
    expect(info).toMatchObject({ templateId: "base", metadata: { run, kind: "a" }, state: "running" });
    const left = (info.endAt.getTime() - Date.now()) / 1000;
    expect(left).toBeGreaterThan(60); // generous: a busy machine may take a while to schedule the pod
    expect(left).toBeLessThanOrEqual(121);
    expect(await sh(a.sandboxId, 'printf %s "$GREETING"')).toBe("hello k8s");

    const onlyA = await Sandbox.list({ ...sdk(), query: { metadata: { run, kind: "a" } } }).nextItems();
    expect(onlyA.map((s) => s.sandboxId)).toEqual([a.sandboxId]);

    const before = Date.now();
    await a.setTimeout(900_000);
    const moved = (await a.getInfo()).endAt.getTime();
    expect(moved).toBeGreaterThanOrEqual(before + 900_000 - 1000);
    expect(moved).toBeLessThanOrEqual(Date.now() + 900_000 + 1000);

    expect(await a.kill()).toBe(true);
    expect(await Sandbox.kill(a.sandboxId, sdk())).toBe(false);
    expect(await b.kill()).toBe(true);
  });

  it("a bad key is an AuthenticationError; another owner's sandbox is not found", async () => {
    await expect(Sandbox.create("base", sdk("nobody"))).rejects.toBeInstanceOf(AuthenticationError);
    const res = await fetch(`${service.url}/v2/anything`, { headers: { "x-api-key": "wrong" } });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: 401 });

    const s = await Sandbox.create("base", sdk());
    await expect(Sandbox.getInfo(s.sandboxId, sdk("bob"))).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.kill(s.sandboxId, sdk("bob"))).toBe(false);
    expect(await Sandbox.list(sdk("bob")).nextItems()).toEqual([]);
    expect(await s.kill()).toBe(true);
  });
});
