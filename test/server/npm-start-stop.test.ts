// Stopping `npm start` the way a supervisor does: one signal to the PID it started (npm's, not
// the process group's, not the node under it). SIGTERM and SIGINT must stop the service, every
// sandbox and the embedded registry; so must npm dying by SIGKILL, which relays nothing. Each
// case runs the real `npm start` with a live sandbox, then checks the process tree under npm,
// every process naming the state dir, and the sandboxes' cgroups: nothing may be left.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { HttpManager } from "../../runtime/client/http.ts";
import { cgroupPids, detectCgroups, sandboxDirs } from "../../runtime/local/cgroups.ts";
import { cgroupRootName } from "../../runtime/local/records.ts";

const repo = resolve(import.meta.dirname, "../..");
/** generous: shutting down drains requests and kills sandboxes on a machine shared with builds */
const STOP_BOUND_MS = 45_000;

interface Proc {
  pid: number;
  /** field 22 of /proc/PID/stat: tells a live process from a later one that reuses its pid */
  start: string;
  cmd: string;
}

function readProc(pid: string): (Proc & { ppid: number }) | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim();
    return { pid: Number(pid), ppid: Number(rest[1]), start: rest[19], cmd };
  } catch {
    return undefined; // exited while we looked
  }
}

function allProcs(): (Proc & { ppid: number })[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .map(readProc)
    .filter((p): p is Proc & { ppid: number } => p !== undefined && p.cmd !== "");
}

/** root and every process below it, now */
function tree(root: number): Proc[] {
  const procs = allProcs();
  const out: Proc[] = [];
  const walk = (pid: number) => {
    for (const p of procs.filter((q) => q.ppid === pid)) {
      out.push(p);
      walk(p.pid);
    }
  };
  const self = procs.find((p) => p.pid === root);
  if (self) out.push(self);
  walk(root);
  return out;
}

function stillAlive(procs: Proc[]): Proc[] {
  return procs.filter((p) => readProc(String(p.pid))?.start === p.start);
}

const naming = (dir: string) => allProcs().filter((p) => p.cmd.includes(dir));

/** every process in the cgroups of this state dir's sandboxes */
function sandboxCgroupPids(stateDir: string): number[] {
  const layout = detectCgroups(cgroupRootName(stateDir));
  return cgroupPids(layout, sandboxDirs(layout, ""));
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

interface Started {
  npm: ChildProcess;
  work: string;
  stateDir: string;
  out: () => string;
  exited: Promise<{ code: number | null; signal: string | null }>;
}

let started: Started | undefined;
let seen: Proc[] = [];

async function npmStart(ready: RegExp = /SBX_TOKEN=(sbx_\S+)/): Promise<Started> {
  const work = mkdtempSync(join(tmpdir(), "sbx-stop-"));
  const stateDir = join(work, "state");
  writeFileSync(
    join(work, "config.json"),
    JSON.stringify({ platform: "local", listen: { host: "127.0.0.1", port: 0 }, local: { stateDir } }),
  );
  let out = "";
  // detached: npm leads a process group of its own, so nothing else of this run (the terminal's
  // Ctrl-C, a group signal) reaches it; the test signals npm's PID and nothing else
  const npm = spawn("npm", ["start", "--silent"], {
    cwd: repo,
    env: { ...process.env, SBX_CONFIG: join(work, "config.json") },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  npm.stdout!.on("data", (c) => (out += c));
  npm.stderr!.on("data", (c) => (out += c));
  npm.stdout!.on("error", () => undefined);
  npm.stderr!.on("error", () => undefined);
  const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
    npm.on("exit", (code, signal) => r({ code, signal })),
  );
  started = { npm, work, stateDir, out: () => out, exited };
  const up = await until(() => ready.test(out) || npm.exitCode !== null, 90_000);
  if (!up || npm.exitCode !== null) throw new Error(`npm start did not come up:\n${out}`);
  return started;
}

const urlOf = (out: string) => /SBX_SERVER=(http:\/\/\S+)/.exec(out)![1];
const tokenOf = (out: string) => /SBX_TOKEN=(sbx_\S+)/.exec(out)![1];

afterEach(() => {
  // safety net for a failed case: nothing of it may outlive the test
  if (!started) return;
  const { npm, work, stateDir } = started;
  for (const p of stillAlive([...seen, ...naming(stateDir)])) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  if (npm.exitCode === null && npm.signalCode === null) npm.kill("SIGKILL");
  const pidFile = join(stateDir, "registry", "registry.pid");
  if (existsSync(pidFile)) {
    try {
      process.kill(Number(readFileSync(pidFile, "utf8")), "SIGKILL");
    } catch {
      // stopped with the service
    }
  }
  rmSync(work, { recursive: true, force: true });
  started = undefined;
  seen = [];
});

describe("stopping `npm start` through the PID the user started", () => {
  it.each([
    { how: "SIGTERM to npm", signal: "SIGTERM" as const },
    { how: "SIGINT to npm", signal: "SIGINT" as const },
    { how: "SIGKILL to npm (the service notices its parent is gone)", signal: "SIGKILL" as const },
  ])(
    "$how stops the service, every sandbox and the registry",
    async ({ signal }) => {
      const s = await npmStart();
      const client = new HttpManager({ server: urlOf(s.out()), token: tokenOf(s.out()) });
      const sandbox = await client.create({ owner: "ignored", profile: "base", size: "nano" });
      await client.wait("", sandbox.id, { timeoutMs: 60_000 });

      seen = tree(s.npm.pid!);
      const service = seen.find((p) => p.cmd.includes("runtime/main.ts"));
      expect(service, seen.map((p) => p.cmd).join("\n")).toBeDefined();
      // the allocator setting the Deployments carry too (RUNTIME_PROCESS_ENV, components/runtime/render.ts)
      const environ = readFileSync(`/proc/${service!.pid}/environ`, "utf8").split("\0");
      expect(environ).toContain("MALLOC_MMAP_THRESHOLD_=65536");
      expect(
        seen.some((p) => p.cmd.includes("docker-registry")),
        "the embedded registry runs under npm start",
      ).toBe(true);
      expect(sandboxCgroupPids(s.stateDir).length, "the sandbox has processes").toBeGreaterThan(0);
      const sandboxProcs = naming(s.stateDir);
      expect(sandboxProcs.length).toBeGreaterThan(0);
      seen = [...seen, ...sandboxProcs.filter((p) => !seen.some((q) => q.pid === p.pid))];

      process.kill(s.npm.pid!, signal);
      const npmExit = await Promise.race([
        s.exited,
        new Promise<undefined>((r) => setTimeout(() => r(undefined), STOP_BOUND_MS)),
      ]);
      expect(
        npmExit,
        `npm did not exit within ${STOP_BOUND_MS} ms of ${signal}; still running:\n${stillAlive(seen)
          .map((p) => p.cmd)
          .join("\n")}`,
      ).toBeDefined();
      await until(
        () =>
          stillAlive(seen).length === 0 &&
          naming(s.stateDir).length === 0 &&
          sandboxCgroupPids(s.stateDir).length === 0,
        STOP_BOUND_MS,
      );
      expect(
        stillAlive(seen).map((p) => `${p.pid} ${p.cmd}`),
        s.out().slice(-3000),
      ).toEqual([]);
      expect(naming(s.stateDir).map((p) => `${p.pid} ${p.cmd}`)).toEqual([]);
      expect(sandboxCgroupPids(s.stateDir)).toEqual([]);
      // a clean shutdown, not a kill: the service closed its sandboxes itself
      expect(s.out()).toContain("sbx: stopped; every sandbox of this service is closed");
      if (signal !== "SIGKILL") expect(npmExit).toEqual({ code: 0, signal: null });
    },
    180_000,
  );

  it("SIGTERM during start-up (registry up, service not yet listening) is served once started", async () => {
    // the registry starts before the backend and the listener (most of a second); a signal in
    // that window used to kill node by default and orphan the registry
    const s = await npmStart(/snapshot registry on loopback/);
    seen = tree(s.npm.pid!);
    process.kill(s.npm.pid!, "SIGTERM");
    const npmExit = await Promise.race([
      s.exited,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), STOP_BOUND_MS)),
    ]);
    expect(npmExit, s.out().slice(-3000)).toEqual({ code: 0, signal: null });
    await until(() => stillAlive(seen).length === 0 && naming(s.stateDir).length === 0, STOP_BOUND_MS);
    expect(
      stillAlive(seen).map((p) => `${p.pid} ${p.cmd}`),
      s.out().slice(-3000),
    ).toEqual([]);
    expect(naming(s.stateDir).map((p) => `${p.pid} ${p.cmd}`)).toEqual([]);
    expect(s.out()).toContain("sbx: stopped; every sandbox of this service is closed");
  }, 180_000);
});
