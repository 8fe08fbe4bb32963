// Cgroups for local sandboxes, v1 and v2 behind one small interface.
//
// Layout (per controller on v1, once on v2):  <root>/<key>        the sandbox: its limits
//                                               <root>/<key>/init   the helper (PID 1) and relays
//                                               <root>/<key>/<cmd>  one per exec, made by the helper
// <key> is delegated to the sandbox's unprivileged uid (the directory and its cgroup.procs are
// chowned), so the helper creates per-command children without any privilege; their limits stay
// bounded by <key>, whose limit files remain root's. The host passes the helper open directory fds
// of <key>; the cgroup filesystem itself is never mounted inside the sandbox.
import fs from "node:fs";
import path from "node:path";
import type { SizeClass } from "../core/types.ts";

export type CgroupVersion = 1 | 2;

export interface CgroupLayout {
  version: CgroupVersion;
  /** v1: controller -> mount point; v2: { unified: mount point } */
  mounts: Record<string, string>;
  /** directory name under each mount that holds this backend's sandboxes */
  rootName: string;
}

/** The controllers a sandbox uses. v1 needs each mounted as its own (or a shared) hierarchy. */
const V1_CONTROLLERS = ["memory", "pids", "cpu"] as const;
const V2_CONTROLLERS = ["memory", "pids", "cpu"] as const;

/** Reads /proc/self/mountinfo and decides which cgroup version to use. */
export function detectCgroups(
  rootName: string,
  mountinfo = fs.readFileSync("/proc/self/mountinfo", "utf8"),
  readControllers = (mount: string) => readOr(path.join(mount, "cgroup.controllers"), ""),
): CgroupLayout {
  const v1: Record<string, string> = {};
  let unified: string | undefined;
  for (const line of mountinfo.split("\n")) {
    const [pre, post] = line.split(" - ");
    if (!post) continue;
    const mountPoint = pre.split(" ")[4];
    const [fstype, , superOpts = ""] = post.split(" ");
    if (fstype === "cgroup2" && (mountPoint === "/sys/fs/cgroup" || !unified)) unified = mountPoint;
    if (fstype === "cgroup") {
      for (const opt of superOpts.split(","))
        if ((V1_CONTROLLERS as readonly string[]).includes(opt)) v1[opt] = mountPoint;
    }
  }
  if (V1_CONTROLLERS.every((c) => v1[c])) return { version: 1, mounts: v1, rootName };
  if (unified) {
    const available = readControllers(unified).split(/\s+/);
    const missing = V2_CONTROLLERS.filter((c) => !available.includes(c));
    if (missing.length === 0) return { version: 2, mounts: { unified }, rootName };
    throw new Error(
      `cgroups: the cgroup2 hierarchy at ${unified} lacks controllers ${missing.join(", ")} and no cgroup v1 hierarchy provides them; ` +
        `mount cgroup2 with those controllers (boot with systemd.unified_cgroup_hierarchy=1) or mount the v1 memory, pids and cpu hierarchies`,
    );
  }
  throw new Error(
    "cgroups: neither cgroup v2 nor the v1 memory, pids and cpu hierarchies are mounted under /sys/fs/cgroup; mount them (the local backend needs them for limits)",
  );
}

/** Directories of one sandbox (or one of its children), one per hierarchy. */
export type CgroupDirs = Record<string, string>;

export function sandboxDirs(layout: CgroupLayout, key: string): CgroupDirs {
  const out: CgroupDirs = {};
  for (const [name, mount] of Object.entries(layout.mounts)) out[name] = path.join(mount, layout.rootName, key);
  return out;
}

export function childDirs(dirs: CgroupDirs, child: string): CgroupDirs {
  return Object.fromEntries(Object.entries(dirs).map(([k, d]) => [k, path.join(d, child)]));
}

/** Every sandbox key that has a cgroup under this backend's root (for cleaning up after a crash). */
export function listSandboxKeys(layout: CgroupLayout): string[] {
  const keys = new Set<string>();
  for (const mount of Object.values(layout.mounts)) {
    for (const e of readdirOr(path.join(mount, layout.rootName))) if (e.isDirectory()) keys.add(e.name);
  }
  return [...keys];
}

/** Creates the sandbox's cgroups with the size class's limits and delegates them to uid. */
export function createSandboxCgroups(layout: CgroupLayout, key: string, size: SizeClass, uid: number): CgroupDirs {
  const dirs = sandboxDirs(layout, key);
  const periodUs = 100_000;
  const quotaUs = Math.max(1000, Math.round((size.cpuLimitMillis * periodUs) / 1000));
  if (layout.version === 1) {
    for (const [ctrl, dir] of Object.entries(dirs)) {
      fs.mkdirSync(path.dirname(dir), { recursive: true });
      fs.mkdirSync(dir, { recursive: false });
      if (ctrl === "memory") {
        write(dir, "memory.limit_in_bytes", String(size.memoryLimitBytes));
        // no swap: memory+swap gets the same limit (absent when swap accounting is off)
        if (fs.existsSync(path.join(dir, "memory.memsw.limit_in_bytes")))
          write(dir, "memory.memsw.limit_in_bytes", String(size.memoryLimitBytes));
      } else if (ctrl === "pids") {
        write(dir, "pids.max", String(size.pids));
      } else if (ctrl === "cpu") {
        write(dir, "cpu.cfs_period_us", String(periodUs));
        write(dir, "cpu.cfs_quota_us", String(quotaUs));
        write(dir, "cpu.shares", String(Math.max(2, Math.round((size.cpuRequestMillis * 1024) / 1000))));
      }
      fs.mkdirSync(path.join(dir, "init"));
      delegate(dir, uid, ["cgroup.procs", "tasks"]);
    }
  } else {
    const root = path.join(layout.mounts.unified, layout.rootName);
    if (!fs.existsSync(root)) {
      enableControllers(layout.mounts.unified);
      fs.mkdirSync(root, { recursive: true });
    }
    enableControllers(root);
    const dir = dirs.unified;
    fs.mkdirSync(dir);
    write(dir, "memory.max", String(size.memoryLimitBytes));
    if (fs.existsSync(path.join(dir, "memory.swap.max"))) write(dir, "memory.swap.max", "0");
    write(dir, "pids.max", String(size.pids));
    write(dir, "cpu.max", `${quotaUs} ${periodUs}`);
    write(dir, "cpu.weight", String(Math.min(10000, Math.max(1, Math.round(size.cpuRequestMillis / 10)))));
    // children need memory (OOM attribution per command) and pids; legal because processes
    // live only in the leaves (init and the per-command groups)
    write(dir, "cgroup.subtree_control", "+memory +pids");
    fs.mkdirSync(path.join(dir, "init"));
    delegate(dir, uid, ["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"]);
  }
  return dirs;
}

function enableControllers(dir: string): void {
  const enabled = readOr(path.join(dir, "cgroup.subtree_control"), "").split(/\s+/);
  const want = V2_CONTROLLERS.filter((c) => !enabled.includes(c));
  if (want.length) write(dir, "cgroup.subtree_control", want.map((c) => `+${c}`).join(" "));
}

function delegate(dir: string, uid: number, files: string[]): void {
  fs.chownSync(dir, uid, uid);
  for (const f of files) if (fs.existsSync(path.join(dir, f))) fs.chownSync(path.join(dir, f), uid, uid);
}

/** Opens each sandbox directory for the helper (passed as inherited fds; closed by the caller). */
export function openDirFds(dirs: CgroupDirs): number[] {
  return Object.values(dirs).map((d) => fs.openSync(d, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY));
}

/** Host pids of every process in a cgroup and its descendants. */
export function cgroupPids(layout: CgroupLayout, dirs: CgroupDirs): number[] {
  const dir = layout.version === 1 ? dirs.pids : dirs.unified;
  const pids: number[] = [];
  const walk = (d: string) => {
    for (const line of readOr(path.join(d, "cgroup.procs"), "").split("\n")) if (line) pids.push(Number(line));
    for (const e of readdirOr(d)) if (e.isDirectory()) walk(path.join(d, e.name));
  };
  walk(dir);
  return pids;
}

/**
 * Kills every process in the cgroup tree and waits until it is empty. v2 uses cgroup.kill
 * (atomic); v1 repeats read-and-SIGKILL, which converges because a killed process cannot fork
 * and the pids limit bounds how many can appear meanwhile.
 */
export async function killCgroup(layout: CgroupLayout, dirs: CgroupDirs, timeoutMs = 5000): Promise<boolean> {
  const killFile = layout.version === 2 ? path.join(dirs.unified, "cgroup.kill") : undefined;
  const deadline = Date.now() + timeoutMs;
  for (let round = 0; ; round++) {
    if (killFile && fs.existsSync(killFile)) {
      try {
        fs.writeFileSync(killFile, "1");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
    const pids = cgroupPids(layout, dirs);
    if (pids.length === 0) return true;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone: exactly what we want
      }
    }
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, round < 10 ? 1 : 10));
  }
}

/** Removes this backend's root cgroup in every hierarchy if it is empty (a closed backend leaves nothing). */
export function removeRootIfEmpty(layout: CgroupLayout): void {
  for (const mount of Object.values(layout.mounts)) {
    try {
      fs.rmdirSync(path.join(mount, layout.rootName));
    } catch {
      // still has sandboxes (another process of the same state dir is impossible; a leftover is cleaned at next start) or gone
    }
  }
}

/** Removes the cgroup tree bottom-up; returns false if a directory is still busy. */
export function removeCgroup(dirs: CgroupDirs): boolean {
  let ok = true;
  const rm = (d: string) => {
    for (const e of readdirOr(d)) if (e.isDirectory()) rm(path.join(d, e.name));
    try {
      fs.rmdirSync(d);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "ENOENT") ok = false;
    }
  };
  for (const d of Object.values(dirs)) rm(d);
  return ok;
}

/** The sandbox's pids controller: its limit, its count now, and how many forks it refused so far. */
export interface PidsState {
  max: number;
  current: number;
  /** forks refused by the limit so far, as counted in pids.events ("max") of the sandbox and its init */
  refused: number;
}

export function readPids(layout: CgroupLayout, dirs: CgroupDirs): PidsState {
  const dir = layout.version === 1 ? dirs.pids : dirs.unified;
  const max = readOr(path.join(dir, "pids.max"), "max").trim();
  // v2 counts a refused fork in the cgroup whose limit refused it; v1 (kernel 6.x) in the
  // cgroup of the process that forked, which for a relay is init: read both
  const refused = (d: string) => Number(/(?:^|\n)max (\d+)/.exec(readOr(path.join(d, "pids.events"), ""))?.[1] ?? 0);
  return {
    max: max === "max" ? Infinity : Number(max),
    current: Number(readOr(path.join(dir, "pids.current"), "0").trim()),
    refused: refused(dir) + refused(path.join(dir, "init")),
  };
}

/**
 * Whether a command that could not start (its connection lost before any frame: the helper
 * could not fork a relay) failed because of the pids limit: a fork was refused meanwhile, or
 * the sandbox is at its limit now. A relay or command needs one pid each.
 */
export function shouldBlamePidsLimit(before: PidsState, after: PidsState): boolean {
  return after.refused > before.refused || after.current >= after.max - 1;
}

/** How many processes the kernel OOM-killed in this cgroup (and its descendants). */
export function oomKills(layout: CgroupLayout, dirs: CgroupDirs): number {
  const file =
    layout.version === 1 ? path.join(dirs.memory, "memory.oom_control") : path.join(dirs.unified, "memory.events");
  const m = /(?:^|\n)oom_kill (\d+)/.exec(readOr(file, ""));
  return m ? Number(m[1]) : 0;
}

function write(dir: string, file: string, value: string): void {
  try {
    fs.writeFileSync(path.join(dir, file), value);
  } catch (err) {
    throw new Error(
      `cgroups: cannot write ${JSON.stringify(value)} to ${path.join(dir, file)}: ${(err as Error).message}; the local backend needs root and writable cgroups`,
    );
  }
}

function readOr(file: string, fallback: string): string {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return fallback;
  }
}

function readdirOr(dir: string): fs.Dirent[] {
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}
