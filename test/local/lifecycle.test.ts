// Lifecycle of local sandboxes: TTL, external kill, files, logs, delete, warm pool, restart, close.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../runtime/core/clock.ts";
import type { SandboxEvent } from "../../runtime/core/types.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { cgroupRootName, readRecords, uidBlockBase } from "../../runtime/local/records.ts";
import { WorkspaceStore } from "../../runtime/local/workspaces.ts";
import { collect, createReady, processesWithUidIn, run, spec, startBackend, tempStateDir, type Harness } from "./harness.ts";

const repo = path.resolve(import.meta.dirname, "../..");

function recordOf(stateDir: string, id: string) {
  const r = readRecords(stateDir).find((x) => x.record?.sandbox?.id === id)?.record;
  if (!r) throw new Error(`no record for ${id} in ${stateDir}`);
  return r;
}

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function cgroupSandboxDirs(stateDir: string): string[] {
  const root = `/sys/fs/cgroup/memory/${cgroupRootName(stateDir)}`;
  const v2 = `/sys/fs/cgroup/${cgroupRootName(stateDir)}`;
  const dir = fs.existsSync(root) ? root : v2;
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
}

describe("local lifecycle", () => {
  let h: Harness;
  const events: SandboxEvent[] = [];
  beforeAll(async () => {
    h = await startBackend();
    h.backend.subscribe((e) => events.push(e));
  });
  afterAll(async () => {
    await h?.backend.close();
  });

  it("reports an externally killed sandbox as Failed and emits it", async () => {
    const id = await createReady(h);
    expect(events.some((e) => e.type === "upsert" && e.sandbox.id === id && e.sandbox.ready)).toBe(true);
    // the record is written just after readiness is announced
    process.kill(await until("the helper pid on record", () => recordOf(h.stateDir, id).helperPid), "SIGKILL");
    const ev = await until("a Failed event", () => events.find((e) => e.type === "upsert" && e.sandbox.id === id && e.sandbox.phase === "Failed"));
    expect(ev).toMatchObject({ sandbox: { reason: "Error", ready: false } });
    await expect(h.backend.exec(id, { command: ["true"] })).rejects.toMatchObject({ code: "failed" });
    expect(await h.backend.describe(id)).toMatchObject({ phase: "Failed" });
  });

  it("moves files in and out as tar streams, as the sandbox's user", async () => {
    const id = await createReady(h);
    const src = fs.mkdtempSync(path.join(os.tmpdir(), "sbxl-src-"));
    fs.mkdirSync(path.join(src, "sub"));
    fs.writeFileSync(path.join(src, "sub", "a.txt"), "alpha\n");
    const tarIn = spawn("tar", ["-c", "-f", "-", "-C", src, "sub"]);
    await h.backend.putArchive(id, "/workspace/in", tarIn.stdout);
    const r = await run(h.backend, id, "cat /workspace/in/sub/a.txt; stat -c %u /workspace/in/sub/a.txt; id -u");
    const [content, owner, uid] = r.stdout.trim().split("\n");
    expect(content).toBe("alpha");
    expect(owner).toBe(uid);

    const out = await h.backend.getArchive(id, "/workspace/in/sub");
    const list = spawn("tar", ["-t", "-v", "-f", "-"]);
    out.pipe(list.stdin);
    expect(await collect(list.stdout)).toMatch(/sub\/a\.txt/);

    await expect(h.backend.getArchive(id, "/workspace/missing")).rejects.toMatchObject({ code: "not_found" });
    const again = spawn("tar", ["-c", "-f", "-", "-C", src, "sub"]);
    await expect(h.backend.putArchive(id, "/usr/share/sbx-nope", again.stdout)).rejects.toMatchObject({ code: "validation" });
  });

  it("serves the sandbox's init log", async () => {
    const id = await createReady(h);
    expect(await collect(await h.backend.logs(id, {}))).toMatch(/sbx-helper: ready uid=\d+/);
    expect(await collect(await h.backend.logs(id, { tailLines: 1 }))).toMatch(/^sbx-helper: ready/);
  });

  it("follows the log until the sandbox is gone", async () => {
    const id = await createReady(h);
    const follow = await h.backend.logs(id, { follow: true });
    const text = collect(follow);
    await new Promise((r) => setTimeout(r, 300));
    await h.backend.delete(id);
    expect(await text).toMatch(/sbx-helper: ready/);
  });

  it("refuses exec before ready and for unknown ids, with the domain errors", async () => {
    const s = spec(h.config);
    await h.backend.provision(s);
    await expect(h.backend.exec(s.id, { command: ["true"] })).rejects.toMatchObject({ code: "conflict" });
    await expect(h.backend.exec("nope", { command: ["true"] })).rejects.toMatchObject({ code: "not_found" });
    await expect(h.backend.provision(s)).rejects.toMatchObject({ code: "conflict" });
    await h.backend.awaitReady(s.id, { timeoutMs: 10_000 });
  });

  it("delete removes processes, cgroups and files, and is idempotent", async () => {
    const id = await createReady(h);
    const rec = recordOf(h.stateDir, id);
    expect(processesWithUidIn(rec.uid, rec.uid + 1).length).toBeGreaterThan(0);
    await h.backend.delete(id);
    expect(await h.backend.describe(id)).toBeUndefined();
    expect((await h.backend.list()).map((s) => s.id)).not.toContain(id);
    expect(processesWithUidIn(rec.uid, rec.uid + 1)).toEqual([]);
    expect(cgroupSandboxDirs(h.stateDir)).not.toContain(rec.key);
    expect(fs.existsSync(path.join(h.stateDir, "sandboxes", rec.key))).toBe(false);
    expect(events.some((e) => e.type === "delete" && e.id === id)).toBe(true);
    await h.backend.delete(id);
  });
});

describe("workspace removal", () => {
  it("takes a slot's directory away at once and deletes it in the background; close() waits, start() deletes what a crash left", async () => {
    const stateDir = tempStateDir();
    const trash = path.join(stateDir, "workspaces", "trash");
    const store = new WorkspaceStore(stateDir, silentLogger());
    await store.start();
    const slot = path.join(stateDir, "sandboxes", "k1");
    fs.mkdirSync(slot, { recursive: true });
    fs.writeFileSync(path.join(slot, "workspace.img"), Buffer.alloc(1 << 20, 1));
    await store.remove(slot);
    expect(fs.existsSync(slot)).toBe(false);
    await store.remove(path.join(stateDir, "sandboxes", "absent"));
    await store.close();
    expect(fs.readdirSync(trash)).toEqual([]);

    fs.mkdirSync(path.join(trash, "k2-left-by-a-crash"));
    const next = new WorkspaceStore(stateDir, silentLogger());
    await next.start();
    expect(fs.existsSync(trash)).toBe(false);
    await next.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  });
});

describe("local TTL", () => {
  it("kills the sandbox when its time to live passes on the injected clock", async () => {
    const clock = new ManualClock(Date.now());
    const h = await startBackend({ clock });
    try {
      const events: SandboxEvent[] = [];
      h.backend.subscribe((e) => events.push(e));
      const id = await createReady(h, { clock, ttlSeconds: 60 });
      await clock.advance(59_000);
      expect((await run(h.backend, id, "echo alive")).stdout).toBe("alive\n");
      await clock.advance(2_000);
      const ev = await until("DeadlineExceeded", () => events.find((e) => e.type === "upsert" && e.sandbox.phase === "Failed"));
      expect(ev).toMatchObject({ sandbox: { id, reason: "DeadlineExceeded", ready: false } });
      const rec = recordOf(h.stateDir, id);
      expect(processesWithUidIn(rec.uid, rec.uid + 1)).toEqual([]);
    } finally {
      await h.backend.close();
    }
  });
});

describe("local warm pool", () => {
  it("claims a pre-started slot with the spec's identity and env, then refills", async () => {
    const h = await startBackend({ config: { warmPool: [{ profile: "base", size: "nano", count: 2 }] } });
    try {
      const s1 = spec(h.config, { env: { WHO: "first" } });
      const t0 = performance.now();
      const got = await until("a warm slot", () => h.backend.claim(s1));
      expect(got).toMatchObject({ id: s1.id, owner: "tester", warm: true, ready: true, phase: "Running" });
      const claimMs = performance.now() - t0;
      expect((await run(h.backend, s1.id, 'echo "$WHO $(hostname)"')).stdout).toMatch(/^first /);
      expect((await h.backend.list()).map((s) => s.id)).toEqual([s1.id]);
      const s2 = spec(h.config);
      expect(await until("a second warm slot", () => h.backend.claim(s2))).toMatchObject({ warm: true });
      // refill: the pool makes new slots for the ones claimed
      const s3 = spec(h.config);
      expect(await until("a refilled slot", () => h.backend.claim(s3), 15_000)).toMatchObject({ warm: true });
      expect(await h.backend.claim(spec(h.config, { image: { profile: "other", image: "host" } }))).toBeUndefined();
      expect(claimMs).toBeLessThan(10_000);
    } finally {
      await h.backend.close();
    }
  });
});

describe("local restart and shutdown", () => {
  it("adopts sandboxes a crashed process left running, reports the dead ones, and close() leaves nothing", async () => {
    const stateDir = tempStateDir();
    const child = spawn(process.execPath, ["--import", "tsx", "test/local/fixtures/crash-after-create.ts", stateDir, "2"], { cwd: repo, stdio: ["ignore", "pipe", "inherit"] });
    let line = "";
    for await (const chunk of child.stdout) {
      line += chunk;
      if (line.includes("\n")) break;
    }
    const [alive, dead] = JSON.parse(line) as string[];
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    const deadRec = recordOf(stateDir, dead);
    process.kill(deadRec.helperPid!, "SIGKILL");
    await until("the dead sandbox's processes to go", () => processesWithUidIn(deadRec.uid, deadRec.uid + 1).length === 0);

    const h = await startBackend({ stateDir });
    const base = uidBlockBase(stateDir);
    try {
      const byId = Object.fromEntries((await h.backend.list()).map((s) => [s.id, s]));
      expect(byId[alive]).toMatchObject({ phase: "Running", ready: true, idleTimeoutSeconds: 321 });
      expect(byId[dead]).toMatchObject({ phase: "Failed", reason: "Lost" });
      expect((await run(h.backend, alive, "cat /workspace/marker")).stdout).toBe("kept-0\n");
      // the dead one's workspace is unmounted but kept: read the ext4 image without mounting it
      const img = path.join(stateDir, "sandboxes", deadRec.key, "workspace.img");
      expect(execFileSync("debugfs", ["-R", "cat /marker", img], { stdio: ["ignore", "pipe", "ignore"] }).toString()).toBe("kept-1\n");
      expect(processesWithUidIn(base, base + 65536).length).toBeGreaterThan(0);
      // workspaces are mounted inside the sandboxes' own namespaces, never on the host
      expect(fs.readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(stateDir);
    } finally {
      await h.backend.close();
    }
    expect(processesWithUidIn(base, base + 65536)).toEqual([]);
    expect(cgroupSandboxDirs(stateDir)).toEqual([]);
    expect(fs.existsSync(`/sys/fs/cgroup/memory/${cgroupRootName(stateDir)}`) || fs.existsSync(`/sys/fs/cgroup/${cgroupRootName(stateDir)}`)).toBe(false);
    const bwraps = fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((p) => {
      try {
        return fs.readFileSync(`/proc/${p}/cmdline`, "utf8").includes(stateDir);
      } catch {
        return false;
      }
    });
    expect(bwraps).toEqual([]);
    // after a clean shutdown the sandboxes are listed as stopped, so admission starts from zero
    const again = await startBackend({ stateDir });
    try {
      expect((await again.backend.list()).every((s) => s.phase === "Failed")).toBe(true);
    } finally {
      await again.backend.close();
    }
  });
});
