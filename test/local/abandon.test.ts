// Commands their caller gave up on, through the real service on a real socket into real local
// sandboxes: a client that disconnects from an exec or a download leaves no process in the
// sandbox and no fd in the service; a command reported as timed out is dead, also one whose
// deadline passed before it had started; execs past the sandbox's pids limit get 429 naming it.
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { helperExec } from "../../runtime/local/protocol.ts";
import type { SandboxRecord } from "../../runtime/local/records.ts";
import { type Service, startService } from "../../runtime/server/service.ts";
import { localConfig, parseExecFrames, TOKENS, testTokens } from "../support/local.ts";
import { type Abandon, abandon, openFds, request, settle } from "../support/raw-http.ts";
import { processesWithUidIn } from "./harness.ts";

/** generous: cleanup is event-driven and takes milliseconds (logged); this only bounds a busy machine (load 15 on 2 cores) */
const SETTLE_MS = 30_000;
const IDLE_PROCESSES = 2;
const token = TOKENS.alice;
let svc: Service;
let stateDir: string;
let cleanup: () => void;

beforeAll(async () => {
  const made = localConfig({ budget: { cpu: "4", memory: "16Gi" } });
  cleanup = made.cleanup;
  stateDir = made.stateDir;
  const logger = silentLogger();
  svc = await startService({
    config: made.config,
    tokens: testTokens(),
    logger,
    clock: systemClock,
    platform: createLocalPlatform(made.config, { logger, clock: systemClock }),
    port: 0,
    drainMs: 2000,
  });
});
afterAll(async () => {
  await svc?.close();
  cleanup?.();
});

async function createSandbox(): Promise<string> {
  const made = await request(svc.url, token, "POST", "/v1/sandboxes", { profile: "base", size: "nano" });
  expect(made.status, made.body).toBe(201);
  const id = JSON.parse(made.body).id as string;
  const ready = await request(svc.url, token, "POST", `/v1/sandboxes/${id}/wait`, { timeoutSeconds: 30 });
  expect(ready.status, ready.body).toBe(200);
  return id;
}

async function exec(id: string, body: Record<string, unknown>) {
  const r = await request(svc.url, token, "POST", `/v1/sandboxes/${id}/exec`, body);
  // an error answer is one JSON object, not frames
  return { status: r.status, headers: r.headers, body: r.body, ...parseExecFrames(r.status === 200 ? r.body : "") };
}

function record(id: string): SandboxRecord {
  for (const key of fs.readdirSync(path.join(stateDir, "sandboxes"))) {
    const file = path.join(stateDir, "sandboxes", key, "record.json");
    if (!fs.existsSync(file)) continue;
    const rec = JSON.parse(fs.readFileSync(file, "utf8")) as SandboxRecord;
    if (rec.sandbox?.id === id) return rec;
  }
  throw new Error(`no record for sandbox ${id}`);
}

/** the sandbox's uid: every process of it (helper, relays, commands, zombies) runs as it */
const sandboxUid = (id: string) => record(id).uid;
const sandboxKey = (id: string) => record(id).key;

function describeProcs(pids: number[]): string[] {
  return pids.map((p) => {
    try {
      return `${p} ${fs.readFileSync(`/proc/${p}/cmdline`, "utf8").replace(/\0/g, " ").trim() || "(zombie)"}`;
    } catch {
      return `${p} (gone)`;
    }
  });
}

describe("a client that disconnects", () => {
  const cases: [string, string, string, unknown, Abandon][] = [
    ["cat /dev/zero, cut after 16 KiB", "POST", "exec", { command: ["cat", "/dev/zero"] }, { afterBytes: 16 * 1024 }],
    ["an unread yes", "POST", "exec", { command: ["yes"] }, { unreadForMs: 300 }],
    // a sparse 100 GiB file: tar would read zeros for minutes
    ["a download cut after its first bytes", "GET", "files?path=/workspace/big", undefined, { afterBytes: 1 }],
  ];
  it.each(cases)(
    "%s: leaves no process in the sandbox and no fd in the service",
    async (_name, method, route, body, how) => {
      const id = await createSandbox();
      const uid = sandboxUid(id);
      // warm up the path once (lazily opened things are not leaks), then take the baselines: the
      // idle sandbox is its helper (PID 1) and the relay of the service's watch connection
      expect((await exec(id, { command: ["sh", "-c", "truncate -s 100G /workspace/big"] })).exit?.exitCode).toBe(0);
      const procsBefore = (
        await settle(
          () => processesWithUidIn(uid, uid + 1),
          (p) => p.length <= IDLE_PROCESSES,
          SETTLE_MS,
        )
      ).length;
      expect(procsBefore).toBe(IDLE_PROCESSES);
      const fdsBefore = openFds();
      for (let i = 0; i < 5; i++) {
        const r = await abandon(svc.url, token, method, `/v1/sandboxes/${id}/${route}`, body, how);
        expect(r.status).toBe(200);
      }
      const t0 = Date.now();
      const procs = await settle(
        () => processesWithUidIn(uid, uid + 1),
        (p) => p.length <= procsBefore,
        SETTLE_MS,
      );
      const fds = await settle(openFds, (n) => n <= fdsBefore, SETTLE_MS);
      console.log(
        `${_name}: clean ${Date.now() - t0} ms after the 5th disconnect (processes ${procs.length}/${procsBefore}, fds ${fds}/${fdsBefore})`,
      );
      expect(procs.length, describeProcs(procs).join("; ")).toBeLessThanOrEqual(procsBefore);
      expect(fds).toBeLessThanOrEqual(fdsBefore);
      // and the sandbox still works
      expect((await exec(id, { command: ["echo", "ok"] })).stdout).toBe("ok\n");
      await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
    },
  );
});

describe("a client that disconnects while its command is starting", () => {
  it("leaves no process behind", async () => {
    const id = await createSandbox();
    const uid = sandboxUid(id);
    await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    // cut at staggered moments so some land after the body was read and before the command ran
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        abandon(
          svc.url,
          token,
          "POST",
          `/v1/sandboxes/${id}/exec`,
          { command: ["sleep", "300"] },
          { beforeResponseMs: i },
        ).catch(() => undefined),
      ),
    );
    const procs = await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    expect(procs.length, describeProcs(procs).join("; ")).toBeLessThanOrEqual(IDLE_PROCESSES);
    await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("a helper connection the service drops", () => {
  it("ends the whole command, also processes that left its process group", async () => {
    const id = await createSandbox();
    const uid = sandboxUid(id);
    await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    const socket = path.join(stateDir, "sandboxes", sandboxKey(id), "run", "helper.sock");
    // what a service that died mid-command leaves: a connection closed without a kill
    const h = helperExec(socket, {
      cgroup: "xdropped",
      cwd: "/workspace",
      argv: ["sh", "-c", "setsid sleep 300 & sleep 301 & echo up; wait"],
      env: { PATH: "/usr/bin:/bin" },
    });
    expect((await h.started).kind).toBe("started");
    await new Promise((r) => h.stdout.once("data", r));
    h.stderr.resume();
    h.destroy();
    const procs = await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    expect(procs.length, describeProcs(procs).join("; ")).toBeLessThanOrEqual(IDLE_PROCESSES);
    await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("a caller of the backend that stops reading", () => {
  it("kill() of a command whose output nobody reads ends it, its relay and its connection", async () => {
    const id = await createSandbox();
    const uid = sandboxUid(id);
    await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    const fdsBefore = openFds();
    const session = await svc.manager.exec("alice", id, { command: ["yes"] });
    // the output fills every buffer on the way, then the relay blocks on the connection
    await new Promise((r) => setTimeout(r, 300));
    session.kill();
    const outcome = await Promise.race([
      session.result,
      new Promise((r) => setTimeout(() => r("no result"), SETTLE_MS)),
    ]);
    expect(outcome).toMatchObject({ exitCode: 137, timedOut: false });
    const procs = await settle(
      () => processesWithUidIn(uid, uid + 1),
      (p) => p.length <= IDLE_PROCESSES,
      SETTLE_MS,
    );
    expect(procs.length, describeProcs(procs).join("; ")).toBeLessThanOrEqual(IDLE_PROCESSES);
    expect(await settle(openFds, (n) => n <= fdsBefore, SETTLE_MS)).toBeLessThanOrEqual(fdsBefore);
    await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("timeouts", () => {
  it("20 of 20 commands reported as timed out are dead, also those whose deadline passed before they started", async () => {
    const id = await createSandbox();
    const timeouts = [...Array(12).fill(1), 2, 5, 10, 25, 50, 100, 500, 1000];
    // the last four also start a process that leaves the command's process group (setsid);
    // it sleeps longer, so that a kill that comes late (a second exec on Kubernetes) is in time
    const marker = (i: number, s: number, suffix = "") => `sleep ${s}; echo done > /workspace/marker-${i}${suffix}`;
    const script = (i: number) =>
      i < 16 ? marker(i, 2) : `setsid sh -c '${marker(i, 6, "-escaped")}' & ${marker(i, 2)}`;
    // all at once: most deadlines pass while the helper is still starting their commands
    const results = await Promise.all(
      timeouts.map((timeoutMs, i) => exec(id, { command: ["sh", "-c", script(i)], timeoutMs })),
    );
    for (const r of results) expect(r.exit, r.body).toMatchObject({ exitCode: 124, timedOut: true });
    // every sleep would have finished by now; none may have
    await new Promise((r) => setTimeout(r, 7000));
    const ls = await exec(id, { command: ["sh", "-c", "ls /workspace | grep marker || true"] });
    expect(ls.stdout.trim()).toBe("");
    await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("the sandbox's pids limit", () => {
  it("500 parallel execs into a nano sandbox (pids 128): each runs or gets 429 naming the limit it met, and the sandbox stays usable", async () => {
    const id = await createSandbox();
    const results = await Promise.all(Array.from({ length: 500 }, () => exec(id, { command: ["sleep", "1"] })));
    const byStatus = new Map<number, number>();
    for (const r of results) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
    console.log(`500 parallel execs: ${JSON.stringify(Object.fromEntries(byStatus))}`);
    const refused = results.filter((r) => r.status === 429);
    expect(refused.length, "some execs must hit the limit").toBeGreaterThan(0);
    expect(results.filter((r) => r.status !== 200 && r.status !== 429).map((r) => `${r.status} ${r.body}`)).toEqual([]);
    for (const r of results.filter((x) => x.status === 200)) expect(r.exit, r.body).toMatchObject({ exitCode: 0 });
    for (const r of refused) {
      const err = JSON.parse(r.body).error;
      expect(err.code).toBe("capacity");
      // the pids limit, or the start queue in front of the helper (16 starting, 128 waiting) being full
      expect(err.message).toMatch(/pids limit \(128\)|is busy: 16 commands are starting and 128 more wait/);
      expect(Number(r.headers["retry-after"])).toBeGreaterThan(0);
    }
    expect((await exec(id, { command: ["echo", "still usable"] })).stdout).toBe("still usable\n");
    await request(svc.url, token, "DELETE", `/v1/sandboxes/${id}`);
  }, 180_000);
});
