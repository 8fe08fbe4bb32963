// Pause and resume through the service on the REAL local backend with a real registry: the
// plain JSON answer stays the default, progress streams as NDJSON when asked (inject, and over
// a socket with the HTTP client), and every resume, explicit or automatic, passes admission:
// its reservation is taken and given back exactly once across pause -> resume -> kill.
// Over 400 lines on purpose: one booted runtime and registry serve every case, which costs far
// less than splitting the file into several that each boot their own.
// Over 400 lines on purpose: one local runtime and registry serve every case; split files would
// each start them again.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryStatusStore } from "../../runtime/autopause/controller.ts";
import { buildManager } from "../../runtime/backends.ts";
import { HttpManager } from "../../runtime/client/http.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import type { Admission } from "../../runtime/core/admission.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { ExecSession, TransferProgress } from "../../runtime/core/types.ts";
import { DirBackend } from "../snapshot/dir-backend.ts";
import { makeFixture } from "../snapshot/fixture.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime, TOKENS } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

let registry: TestRegistry;
let rt: LocalRuntime;
let url: string;

beforeAll(async () => {
  registry = await startRegistry();
  // room for exactly one nano sandbox (100m): a paused one holds nothing, a resume needs the room
  rt = await startLocalRuntime(
    { budget: { cpu: "150m", memory: "4Gi" }, snapshots: { registry: registry.url } },
    { limits: { progressIntervalMs: 0 } },
  );
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  await rt?.close();
  await registry?.stop();
});

const post = (path: string, headers: Record<string, string> = {}, body?: unknown) =>
  rt.app.inject({
    method: "POST",
    url: path,
    headers: { ...auth("alice"), ...headers },
    ...(body === undefined ? {} : { payload: body as object }),
  });

async function running(): Promise<string> {
  const res = await post("/v1/sandboxes", {}, { size: "nano" });
  expect(res.statusCode, res.body).toBe(201);
  const id = res.json().id as string;
  expect((await post(`/v1/sandboxes/${id}/wait`, {}, { timeoutSeconds: 60 })).statusCode).toBe(200);
  return id;
}

async function sh(id: string, script: string): Promise<string> {
  const res = await post(`/v1/sandboxes/${id}/exec`, {}, { command: ["sh", "-c", script], timeoutMs: 120_000 });
  const f = parseExecFrames(res.body);
  if (f.error) throw new Error(`exec ${script}: ${f.error.code} ${f.error.message}`);
  if (f.exit?.exitCode !== 0) throw new Error(`exec ${script} exited ${f.exit?.exitCode}: ${f.stderr}`);
  return f.stdout;
}

const kill = (id: string) => rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${id}`, headers: auth("alice") });

function frames(body: string): Array<{
  progress?: TransferProgress;
  sandbox?: { id: string; phase: string };
  error?: { code: string; message: string };
}> {
  return body
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

/** Records every reservation change of one id: taken (admit/adopt) or given back (release). */
function reservationLog(adm: Admission, id: string): string[] {
  const log: string[] = [];
  const { admit, adopt, release } = adm;
  adm.admit = (req) => {
    const had = adm.has(req.id);
    const r = admit.call(adm, req);
    if (req.id === id && !had) log.push("reserve");
    return r;
  };
  adm.adopt = (s) => {
    const r = adopt.call(adm, s);
    if (r && s.id === id) log.push("adopt");
    return r;
  };
  adm.release = (x) => {
    const r = release.call(adm, x);
    if (r && x === id) log.push("release");
    return r;
  };
  return log;
}

describe("pause and resume over HTTP", () => {
  it("answer plain JSON by default; Accept: application/x-ndjson or ?progress=true stream frames; ?progress=false wins", async () => {
    const id = await running();
    await sh(id, "head -c 3000000 /dev/urandom > /workspace/blob");

    const plain = await post(`/v1/sandboxes/${id}/pause`);
    expect(plain.statusCode).toBe(200);
    expect(plain.headers["content-type"]).toMatch(/^application\/json/);
    expect(plain.json()).toMatchObject({ id, phase: "Paused" });

    const streamed = await post(`/v1/sandboxes/${id}/resume`, { accept: "application/x-ndjson" });
    expect(streamed.statusCode).toBe(200);
    expect(streamed.headers["content-type"]).toBe("application/x-ndjson");
    const fs = frames(streamed.body);
    expect(fs.at(-1)).toMatchObject({ sandbox: { id, phase: "Running" } });
    const ws = fs.filter((f) => f.progress?.path === "/workspace").map((f) => f.progress!);
    expect(ws.length).toBeGreaterThan(1);
    expect(ws.every((p) => p.op === "resume" && p.totalBytes === ws[0].totalBytes)).toBe(true);
    expect(ws.at(-1)!.bytes).toBe(ws[0].totalBytes);
    expect(ws[0].totalBytes).toBeGreaterThan(3_000_000);

    const byQuery = await post(`/v1/sandboxes/${id}/pause?progress=true`);
    expect(byQuery.headers["content-type"]).toBe("application/x-ndjson");
    const pf = frames(byQuery.body);
    expect(pf.at(-1)).toMatchObject({ sandbox: { id, phase: "Paused" } });
    expect(
      pf.filter((f) => f.progress?.op === "pause" && f.progress.path === "/workspace").at(-1)!.progress!.bytes,
    ).toBeGreaterThan(3_000_000);

    const refused = await post(`/v1/sandboxes/${id}/resume?progress=false`, { accept: "application/x-ndjson" });
    expect(refused.headers["content-type"]).toMatch(/^application\/json/);
    expect(refused.json()).toMatchObject({ id, phase: "Running" });
    expect(await sh(id, "wc -c < /workspace/blob")).toBe("3000000\n");
    expect((await kill(id)).statusCode).toBe(204);
  });

  it("a streaming request that fails before any byte moves keeps its status; a bad progress value is a 400 naming it", async () => {
    const missing = await post("/v1/sandboxes/sbx-missingmissing00/pause", { accept: "application/x-ndjson" });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe("not_found");

    const bad = await post("/v1/sandboxes/sbx-missingmissing00/resume?progress=yes");
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.message).toContain("querystring.progress");

    // over budget: the resume is refused with 429 and Retry-After, not a 200 stream
    const a = await running();
    await post(`/v1/sandboxes/${a}/pause`);
    const b = await running();
    const over = await post(`/v1/sandboxes/${a}/resume?progress=true`);
    expect(over.statusCode).toBe(429);
    expect(over.headers["retry-after"]).toBeDefined();
    expect(over.json().error.message).toContain("admission: not enough capacity for size nano");
    await kill(a);
    await kill(b);
  });

  it("a failure after bytes moved is the stream's last frame; the client rethrows it and the sandbox stays paused holding nothing", async () => {
    const res = await post(
      "/v1/sandboxes",
      {},
      { size: "nano", metadata: { "sbx.post-resume": "echo hook-broke >&2; exit 3" } },
    );
    const id = res.json().id as string;
    await post(`/v1/sandboxes/${id}/wait`, {}, { timeoutSeconds: 60 });
    await sh(id, "head -c 1000000 /dev/urandom > /workspace/x");
    await post(`/v1/sandboxes/${id}/pause`);

    const streamed = await post(`/v1/sandboxes/${id}/resume?progress=true`);
    expect(streamed.statusCode).toBe(200);
    const fs = frames(streamed.body);
    expect(fs.some((f) => f.progress?.path === "/workspace")).toBe(true);
    expect(fs.at(-1)!.error).toMatchObject({ code: "conflict" });
    expect(fs.at(-1)!.error!.message).toContain(`post-resume hook of sandbox ${id} exited 3: hook-broke`);

    const alice = new HttpManager({ server: url, token: TOKENS.alice });
    const err = await alice.resume("", id, { onProgress: () => undefined }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "conflict", message: expect.stringContaining("post-resume hook") });
    expect((await alice.get("", id)).phase).toBe("Paused");
    expect(rt.manager.admission.has(id)).toBe(false);
    await kill(id);
  });

  it("OpenAPI describes both answers of pause and resume and the progress query", async () => {
    const doc = (await rt.app.inject({ method: "GET", url: "/openapi.json" })).json();
    for (const op of ["pause", "resume"]) {
      const o = doc.paths[`/v1/sandboxes/{id}/${op}`].post;
      expect(Object.keys(o.responses["200"].content).sort()).toEqual(["application/json", "application/x-ndjson"]);
      expect(o.responses["200"].content["application/x-ndjson"].schema.oneOf).toHaveLength(3);
      expect(o.parameters.find((p: { name: string }) => p.name === "progress")).toMatchObject({
        in: "query",
        required: false,
      });
      expect(o.responses["429"]).toBeDefined();
    }
  });

  it("streams progress over a socket to the HTTP client; the workspace comes back byte for byte", async () => {
    const alice = new HttpManager({ server: url, token: TOKENS.alice });
    const id = await running();
    const digest = "sha256sum /workspace/data.bin /tmp/t.txt";
    await sh(id, "head -c 24000000 /dev/urandom > /workspace/data.bin && echo scratch > /tmp/t.txt");
    const before = await sh(id, digest);

    const paused: TransferProgress[] = [];
    expect(await alice.pause("", id, { onProgress: (p) => paused.push(p) })).toMatchObject({ id, phase: "Paused" });
    const pw = paused.filter((p) => p.path === "/workspace").map((p) => p.bytes);
    expect(pw.length).toBeGreaterThan(1); // one report per upload chunk (16 MiB)
    expect(pw).toEqual([...pw].sort((x, y) => x - y));
    expect(pw.at(-1)).toBeGreaterThan(24_000_000);
    expect(paused.some((p) => p.path === "/tmp")).toBe(true);

    const resumed: TransferProgress[] = [];
    expect(await alice.resume("", id, { onProgress: (p) => resumed.push(p) })).toMatchObject({
      id,
      phase: "Running",
      ready: true,
    });
    const last = resumed.filter((p) => p.path === "/workspace").at(-1)!;
    expect(last.totalBytes).toBe(pw.at(-1));
    expect(last.bytes).toBe(last.totalBytes);
    expect(await sh(id, digest)).toBe(before);

    // without onProgress the client still takes the stream (it keeps a long response moving)
    expect(await alice.pause("", id)).toMatchObject({ phase: "Paused" });
    await alice.kill("", id);
  });
});

describe("auto-resume passes admission", () => {
  it("exec or files on a paused sandbox over budget is a 429 naming the call, and it stays paused; with room it resumes", async () => {
    const a = await running();
    await sh(a, "echo marker-5d1e > /workspace/m");
    await post(`/v1/sandboxes/${a}/pause`);
    const b = await running(); // takes the only room

    const exec = await post(`/v1/sandboxes/${a}/exec`, {}, { command: ["cat", "/workspace/m"] });
    expect(exec.statusCode).toBe(429);
    expect(exec.headers["retry-after"]).toBeDefined();
    expect(exec.json().error.message).toMatch(
      new RegExp(
        `^exec: sandbox ${a} is paused and resuming it needs capacity: admission: not enough capacity for size nano`,
      ),
    );
    const files = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${a}/files?path=/workspace`,
      headers: auth("alice"),
    });
    expect(files.statusCode).toBe(429);
    expect(files.json().error.message).toMatch(/^download files: sandbox .* is paused and resuming it needs capacity/);
    expect(
      (await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${a}`, headers: auth("alice") })).json().phase,
    ).toBe("Paused");
    expect(rt.manager.admission.usage().used.cpuMillis).toBe(100);

    await kill(b);
    expect(await sh(a, "cat /workspace/m")).toBe("marker-5d1e\n");
    expect(
      (await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${a}`, headers: auth("alice") })).json().phase,
    ).toBe("Running");
    expect(rt.manager.admission.has(a)).toBe(true);
    await kill(a);
    expect(rt.manager.admission.usage().reservations).toBe(0);
  });

  it("takes and gives back the reservation exactly once across pause -> auto-resume -> pause -> resume -> kill, with concurrent wakes", async () => {
    const res = await post("/v1/sandboxes", {}, { size: "nano" });
    const id = res.json().id as string;
    const log = reservationLog(rt.manager.admission, id);
    log.push("reserve"); // the create above (the log starts after it)
    await post(`/v1/sandboxes/${id}/wait`, {}, { timeoutSeconds: 60 });
    await sh(id, "head -c 2000000 /dev/urandom > /workspace/w");
    await post(`/v1/sandboxes/${id}/pause`);
    expect(rt.manager.admission.has(id)).toBe(false);

    // three calls wake it at once (two through the backend's auto-resume, one explicit): one reservation
    const run = async (s: ExecSession) => {
      s.stdout.resume();
      s.stderr.resume();
      return (await s.result).exitCode;
    };
    const [e1, e2, r] = await Promise.all([
      rt.manager.exec("alice", id, { command: ["true"] }).then(run),
      rt.manager.exec("alice", id, { command: ["true"] }).then(run),
      rt.manager.resume("alice", id),
    ]);
    expect([e1, e2, r.phase]).toEqual([0, 0, "Running"]);
    await rt.manager.pause("alice", id);
    await rt.manager.resume("alice", id);
    await rt.manager.resume("alice", id); // resuming a running sandbox keeps its one reservation
    await kill(id);
    expect(log).toEqual(["reserve", "release", "reserve", "release", "reserve", "release"]);
    expect(rt.manager.admission.usage().reservations).toBe(0);
  });

  it("a pause and an exec racing on one sandbox leave it holding a reservation exactly when it is not paused", async () => {
    const id = await running();
    await sh(id, "head -c 8000000 /dev/urandom > /workspace/r");
    const exec = rt.manager.exec("alice", id, { command: ["sh", "-c", "wc -c < /workspace/r"] }).then(async (s) => {
      let out = "";
      s.stdout.on("data", (c) => (out += c));
      s.stderr.resume();
      // the result can settle before the last output is read: the output counts once stdout ended
      const [r] = await Promise.all([s.result, finished(s.stdout)]);
      return { out, exitCode: r.exitCode };
    });
    const [paused, raced] = await Promise.allSettled([rt.manager.pause("alice", id), exec]);
    expect(paused.status).toBe("fulfilled");
    // the exec ran before the pause took the snapshot, or woke the sandbox after it, or was
    // running when the pause released the compute (processes are not kept: it ends, not 0)
    if (raced.status === "fulfilled") {
      if (raced.value.exitCode === 0) expect(raced.value.out).toBe("8000000\n");
      else expect(raced.value.out).toBe("");
    }
    const phase = (await rt.manager.get("alice", id)).phase;
    expect(rt.manager.admission.has(id)).toBe(phase !== "Paused");
    // an exec issued after the pause finished wakes it through admission
    expect(await sh(id, "wc -c < /workspace/r")).toBe("8000000\n");
    expect(rt.manager.admission.has(id)).toBe(true);
    await kill(id);
    expect(rt.manager.admission.usage().reservations).toBe(0);
  });

  it("a wake that arrives while a pause is under way waits for it, then reserves: one release, one reserve", async () => {
    // the snapshot test backend (directories + a process per sandbox) lets the pause stop at a step
    const root = await mkdtemp(join(tmpdir(), "sbx-wake-"));
    let armed = true;
    let reached!: () => void;
    const atStep = new Promise<void>((r) => (reached = r));
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const f = makeFixture(root, registry.url, {
      onStep: async (_id, step) => {
        if (step !== "layer-pushed" || !armed) return;
        armed = false;
        reached();
        await gate;
      },
    });
    const config = validateRuntimeConfig({
      local: { stateDir: join(root, "state") },
      budget: { cpu: "150m", memory: "4Gi" },
    });
    const { manager } = await buildManager(config, {
      logger: silentLogger(),
      clock: systemClock,
      // the directory backend as a platform; pause/resume is the fixture's own service
      platform: { backend: f.backend, autoPauseStatus: new MemoryStatusStore(), close: () => f.backend.close() },
      pauseResume: f.snapshotter,
    });
    await manager.start({ reaper: false });
    try {
      const { id } = await manager.create({ owner: "alice", profile: "base", size: "nano" });
      await writeFile(join(f.backend.fsRoot(id), "workspace/m"), "mid-pause\n");
      const log = reservationLog(manager.admission, id);
      // know when the backend has handed the wake to the Manager (test-only look at a private)
      const m = manager as unknown as { autoResume(id: string, op: string): Promise<void> };
      const autoResume = m.autoResume.bind(manager);
      let woke!: () => void;
      const handedOver = new Promise<void>((r) => (woke = r));
      m.autoResume = (sid, op) => {
        woke();
        return autoResume(sid, op);
      };

      const pausing = manager.pause("alice", id);
      await atStep; // the snapshot is being pushed; the record says pausing
      const exec = manager.exec("alice", id, { command: ["sh", "-c", 'cat "$SBX_FS/workspace/m"'] });
      await handedOver;
      expect(log).toEqual([]);
      open();
      expect((await pausing).phase).toBe("Paused");
      const s = await exec;
      let out = "";
      s.stdout.on("data", (c) => (out += c));
      s.stderr.resume();
      expect((await s.result).exitCode).toBe(0);
      expect(out).toBe("mid-pause\n");
      expect(log).toEqual(["release", "reserve"]);
      expect((await manager.get("alice", id)).phase).toBe("Running");
      await manager.kill("alice", id);
      expect(manager.admission.usage().reservations).toBe(0);
    } finally {
      open();
      await manager.close();
      f.oci.close();
      await new DirBackend(join(root, "sandboxes")).killAll();
      await rm(root, { recursive: true, force: true });
    }
  });

  it("a resume queued behind another (an exec's auto-resume) watches that one's bytes move", async () => {
    const id = await running();
    await sh(id, "head -c 3000000 /dev/urandom > /workspace/q");
    await rt.manager.pause("alice", id);
    const first: TransferProgress[] = [];
    const queued: TransferProgress[] = [];
    // the Manager runs them one after the other: the second finds the sandbox running and moves nothing itself
    const [, r] = await Promise.all([
      rt.manager.resume("alice", id, { onProgress: (p) => first.push(p) }),
      rt.manager.resume("alice", id, { onProgress: (p) => queued.push(p) }),
    ]);
    expect(r.phase).toBe("Running");
    for (const seen of [first, queued]) {
      const last = seen.filter((p) => p.path === "/workspace").at(-1)!;
      expect(last.op).toBe("resume");
      expect(last.bytes).toBe(last.totalBytes);
      expect(last.bytes).toBeGreaterThan(3_000_000);
    }
    await kill(id);
  });

  it("without auto-resume the 409 names the fix and nothing is reserved", async () => {
    const res = await post("/v1/sandboxes", {}, { size: "nano", metadata: { "sbx.auto-resume": "false" } });
    const id = res.json().id as string;
    await post(`/v1/sandboxes/${id}/wait`, {}, { timeoutSeconds: 60 });
    await post(`/v1/sandboxes/${id}/pause`);
    const exec = await post(`/v1/sandboxes/${id}/exec`, {}, { command: ["true"] });
    expect(exec.statusCode).toBe(409);
    expect(exec.json().error.message).toBe(
      `exec: sandbox ${id} is paused and does not allow auto-resume: resume it first (sbx resume ${id}), or create sandboxes with metadata sbx.auto-resume=true`,
    );
    expect(rt.manager.admission.has(id)).toBe(false);
    await kill(id);
  });
});
