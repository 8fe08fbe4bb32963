// The whole sandbox lifecycle through the service (injected requests) on real local sandboxes:
// create, wait, exec (output, exit codes, stdin, timeout), files in and out, logs, list, kill;
// idempotent creates; audit; capacity returned on every terminal path (kill, idle, TTL).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../runtime/core/clock.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
let work: string;
const auditPath = () => join(work, "audit.jsonl");

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-lifecycle-"));
  rt = await startLocalRuntime(
    { audit: { path: join(work, "audit.jsonl") }, defaults: { finishedGraceSeconds: 1 } },
    { reaper: true, reaperIntervalMs: 200, limits: { uploadBytes: 256 * 1024 } },
  );
});
afterAll(async () => {
  await rt?.close();
  rmSync(work, { recursive: true, force: true });
});

async function create(body: Record<string, unknown> = {}, who: "alice" | "bob" = "alice", on: LocalRuntime = rt) {
  const res = await on.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth(who), payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { id: string; phase: string; ready: boolean; owner: string };
}

async function exec(id: string, body: Record<string, unknown>) {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: body,
  });
  expect(res.statusCode, res.body).toBe(200);
  expect(res.headers["content-type"]).toBe("application/x-ndjson");
  return parseExecFrames(res.body);
}

/** Polls until `cond`; `ms` is a safety bound far above a normal wait on a loaded machine, not the assertion. */
const until = async (cond: () => Promise<boolean> | boolean, ms: number, what: string) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
};

describe("lifecycle through the service", () => {
  it("create -> wait -> exec -> files -> logs -> list -> kill", async () => {
    const created = await create({ size: "nano", env: { GREETING: "hi" }, metadata: { task: "t1" } });
    expect(created.id).toMatch(/^sbx-[a-z2-7]{16}$/);
    expect(created.owner).toBe("alice");

    const waited = await rt.app.inject({
      method: "POST",
      url: `/v1/sandboxes/${created.id}/wait`,
      headers: auth("alice"),
      payload: { timeoutSeconds: 30 },
    });
    expect(waited.statusCode, waited.body).toBe(200);
    expect(waited.json()).toMatchObject({ id: created.id, ready: true, phase: "Running" });

    const r1 = await exec(created.id, { command: ["sh", "-c", 'echo "$GREETING out"; echo err >&2; exit 7'] });
    expect(r1).toMatchObject({ stdout: "hi out\n", stderr: "err\n", exit: { exitCode: 7, timedOut: false } });

    const r2 = await exec(created.id, { command: ["cat"], stdin: Buffer.from("from stdin\n").toString("base64") });
    expect(r2.stdout).toBe("from stdin\n");
    expect(r2.exit?.exitCode).toBe(0);

    const r3 = await exec(created.id, { command: ["sleep", "10"], timeoutMs: 300 });
    expect(r3.exit).toMatchObject({ exitCode: 124, timedOut: true });

    // files in: a tar of a local directory, unpacked into /workspace
    const src = join(work, "src");
    mkdirSync(join(src, "pkg"), { recursive: true });
    writeFileSync(join(src, "pkg", "hello.txt"), "hello file\n");
    const tarIn = execFileSync("tar", ["-C", src, "-cf", "-", "pkg"]);
    const put = await rt.app.inject({
      method: "PUT",
      url: `/v1/sandboxes/${created.id}/files?path=/workspace`,
      headers: { ...auth("alice"), "content-type": "application/x-tar" },
      payload: tarIn,
    });
    expect(put.statusCode, put.body).toBe(204);
    expect((await exec(created.id, { command: ["cat", "/workspace/pkg/hello.txt"] })).stdout).toBe("hello file\n");

    // files out: the tar the service streams back unpacks to the same bytes
    const got = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${created.id}/files?path=/workspace/pkg`,
      headers: auth("alice"),
    });
    expect(got.statusCode).toBe(200);
    expect(got.headers["content-type"]).toBe("application/x-tar");
    const out = join(work, "out");
    mkdirSync(out, { recursive: true });
    execFileSync("tar", ["-C", out, "-xf", "-"], { input: got.rawPayload });
    expect(readFileSync(join(out, "pkg", "hello.txt"), "utf8")).toBe("hello file\n");

    // an upload without a declared length is cut off at the limit (a real tar of 400 KiB)
    writeFileSync(join(work, "big.bin"), randomBytes(400 * 1024));
    const bigTar = execFileSync("tar", ["-C", work, "-cf", "-", "big.bin"]);
    const big = Readable.from([bigTar.subarray(0, 100 * 1024), bigTar.subarray(100 * 1024)]);
    const tooBig = await rt.app.inject({
      method: "PUT",
      url: `/v1/sandboxes/${created.id}/files?path=/workspace`,
      headers: { ...auth("alice"), "content-type": "application/x-tar" },
      payload: big,
    });
    expect(tooBig.statusCode, tooBig.body).toBe(413);

    const logs = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${created.id}/logs?tailLines=10`,
      headers: auth("alice"),
    });
    expect(logs.statusCode).toBe(200);
    expect(logs.headers["content-type"]).toContain("text/plain");

    const list = await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") });
    expect(list.json().sandboxes.map((s: { id: string }) => s.id)).toContain(created.id);
    const got1 = await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${created.id}`, headers: auth("alice") });
    expect(got1.json()).toMatchObject({ id: created.id, metadata: { task: "t1" }, lastActivityAt: expect.any(String) });

    // Prometheus: latency histograms for create-accept, wait, exec and claim; budget; phases
    await rt.manager.reaper.runOnce();
    const metrics = (await rt.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toMatch(/sbx_create_accept_seconds_count\{outcome="ok",path="cold"\} [1-9]/);
    expect(metrics).toMatch(/sbx_wait_seconds_count\{outcome="ok"\} [1-9]/);
    expect(metrics).toMatch(/sbx_exec_seconds_count\{outcome="ok"\} [1-9]/);
    expect(metrics).toMatch(/sbx_exec_seconds_count\{outcome="timeout"\} 1/);
    expect(metrics).toMatch(/sbx_claim_seconds_count\{outcome="miss"\} [1-9]/);
    expect(metrics).toMatch(/sbx_sandboxes\{phase="Running"\} [1-9]/);
    expect(metrics).toMatch(/sbx_budget_used\{resource="cpu_millis"\} [1-9]/);
    expect(metrics).toMatch(/sbx_budget_free\{resource="memory_bytes"\} \d+/);
    expect(metrics).toMatch(/sbx_provision_seconds_count\{outcome="ok"\} [1-9]/);
    expect(metrics).toMatch(
      /sbx_http_request_seconds_count\{route="\/v1\/sandboxes\/:id\/exec",method="POST",status="200"\} [1-9]/,
    );

    const kill = await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${created.id}`, headers: auth("alice") });
    expect(kill.statusCode).toBe(204);
    const gone = await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${created.id}`, headers: auth("alice") });
    expect(gone.statusCode).toBe(404);
    expect(rt.manager.admission.has(created.id)).toBe(false);

    // audit: every state-changing call with owner, sandbox, time and outcome
    await until(() => readFileSync(auditPath(), "utf8").includes(`"op":"kill"`), 30_000, "the kill audit line");
    const entries = readFileSync(auditPath(), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .filter((e) => e.sandbox === created.id);
    expect(entries.map((e) => `${e.op}:${e.outcome}`)).toEqual([
      "create:ok",
      "exec:ok",
      "exec:ok",
      "exec:ok",
      "put:ok",
      "exec:ok",
      "put:error",
      "kill:ok",
    ]);
    expect(entries.every((e) => e.owner === "alice" && !Number.isNaN(Date.parse(e.time)))).toBe(true);
    expect(entries[1].details.command).toEqual(["sh", "-c", 'echo "$GREETING out"; echo err >&2; exit 7']);
    expect(entries[6].error).toBe("too_large");
  });

  it("a retried create with the same client key returns the same sandbox, even concurrently", async () => {
    const results = await Promise.all(Array.from({ length: 6 }, () => create({ clientKey: "job-42" })));
    const ids = new Set(results.map((r) => r.id));
    expect(ids.size).toBe(1);
    const [id] = ids;
    const later = await create({ clientKey: "job-42" });
    expect(later.id).toBe(id);
    // the same key for another owner is another sandbox
    const bobs = await create({ clientKey: "job-42" }, "bob");
    expect(bobs.id).not.toBe(id);
    const list = await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") });
    expect(list.json().sandboxes.filter((s: { id: string }) => s.id === id)).toHaveLength(1);
    expect(rt.manager.admission.usage().reservations).toBe(2);
    for (const [who, sid] of [
      ["alice", id],
      ["bob", bobs.id],
    ] as const) {
      expect(
        (await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${sid}`, headers: auth(who) })).statusCode,
      ).toBe(204);
    }
    expect(rt.manager.admission.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });

  it("waiting on a sandbox that cannot become ready ends with a clear error, not a hang", async () => {
    const res = await rt.app.inject({
      method: "POST",
      url: "/v1/sandboxes/sbx-aaaaaaaaaaaaaaaa/wait",
      headers: auth("alice"),
      payload: { timeoutSeconds: 1 },
    });
    expect(res.statusCode).toBe(404);
  });
});

describe("capacity comes back on every terminal path", () => {
  it("hard TTL: the sandbox ends (Failed/DeadlineExceeded, or reaped), capacity is released, then it is deleted", async () => {
    const s = await create({ ttlSeconds: 1 });
    expect(rt.manager.admission.has(s.id)).toBe(true);
    // the backend's own TTL timer and the reaper race; either ending is correct
    let seen: { statusCode: number; body: { phase?: string; reason?: string } } = { statusCode: 0, body: {} };
    await until(
      async () => {
        const r = await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${s.id}`, headers: auth("alice") });
        seen = { statusCode: r.statusCode, body: r.json() };
        return r.statusCode === 404 || seen.body.phase === "Failed";
      },
      60_000,
      "the TTL to end the sandbox",
    );
    expect(rt.manager.admission.has(s.id)).toBe(false);
    if (seen.statusCode === 200) {
      expect(seen.body).toMatchObject({ phase: "Failed", reason: "DeadlineExceeded" });
      // exec on a finished sandbox is a clear 409 (or 404 once reaped), not a hang
      const late = await rt.app.inject({
        method: "POST",
        url: `/v1/sandboxes/${s.id}/exec`,
        headers: auth("alice"),
        payload: { command: ["true"] },
      });
      expect([409, 404]).toContain(late.statusCode);
    }
    await until(
      async () =>
        (await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${s.id}`, headers: auth("alice") })).statusCode ===
        404,
      60_000,
      "the reaper to delete the finished sandbox",
    );
    expect(rt.manager.admission.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });
});

describe("idle timeout on the injected clock", () => {
  // its own runtime: the time the reaper and the activity record see is the test's, not the wall's
  const clock = new ManualClock(Date.now());
  let idleRt: LocalRuntime;
  beforeAll(async () => {
    idleRt = await startLocalRuntime({ audit: { path: join(work, "audit-idle.jsonl") } }, { clock, reaper: false });
  });
  afterAll(async () => {
    await idleRt?.close();
  });
  const get = (id: string) => idleRt.app.inject({ method: "GET", url: `/v1/sandboxes/${id}`, headers: auth("alice") });

  it("the reaper deletes a silent sandbox and releases its reservation; API calls keep another alive until they stop", async () => {
    const idle = await create({ idleTimeoutSeconds: 1 }, "alice", idleRt);
    const busy = await create({ idleTimeoutSeconds: 2 }, "alice", idleRt);
    for (const s of [idle, busy]) {
      const w = await idleRt.app.inject({
        method: "POST",
        url: `/v1/sandboxes/${s.id}/wait`,
        headers: auth("alice"),
        payload: { timeoutSeconds: 60 },
      });
      expect(w.statusCode, w.body).toBe(200);
    }
    expect(idleRt.manager.admission.has(idle.id)).toBe(true);
    // 4 s of the clock in 400 ms steps: a call on `busy` every step, nothing on `idle`; a reaper pass each step
    const reaped: { id: string; reason: string; atMs: number }[] = [];
    for (let atMs = 400; atMs <= 4000; atMs += 400) {
      await clock.advance(400);
      expect((await get(busy.id)).statusCode).toBe(200);
      for (const a of await idleRt.manager.reaper.runOnce()) reaped.push({ id: a.id, reason: a.reason, atMs });
    }
    // idle since it became ready: reaped by the first pass 1 s after that (the 3rd step), and only it
    expect(reaped).toEqual([{ id: idle.id, reason: "idle", atMs: 1200 }]);
    expect((await get(idle.id)).statusCode).toBe(404);
    expect(idleRt.manager.admission.has(idle.id)).toBe(false);
    // the audit stream writes asynchronously: poll, with a bound far above any normal write
    await until(
      () =>
        readFileSync(join(work, "audit-idle.jsonl"), "utf8").includes(
          `"sandbox":"${idle.id}","outcome":"ok","details":{"reason":"idle"}`,
        ),
      30_000,
      "the reap audit line",
    );
    expect((await idleRt.app.inject({ method: "GET", url: "/metrics" })).body).toMatch(
      /sbx_reaped_total\{reason="idle"\} 1/,
    );

    // silence reaps `busy` too: not 1.4 s after its last call (activity is written at most every
    // quarter of the idle timeout, so the last write is at most 0.5 s older), but once 2 s have passed
    await clock.advance(1400);
    expect(await idleRt.manager.reaper.runOnce()).toEqual([]);
    await clock.advance(600);
    expect(await idleRt.manager.reaper.runOnce()).toEqual([{ id: busy.id, owner: "alice", reason: "idle" }]);
    expect(idleRt.manager.admission.has(busy.id)).toBe(false);
    expect(idleRt.manager.admission.usage().used).toEqual({ cpuMillis: 0, memoryBytes: 0 });
  });
});
