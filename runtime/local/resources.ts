// What a local sandbox uses, read from the host without entering it (Backend.readResources):
// memory and pids from its cgroup, CPU from its cgroup on v2 (cpu.stat usage_usec) and from
// /proc on v1, /workspace from statfs of its ext4 image's mount as its helper sees it.
//
// Cost per sandbox per tick: v2 reads four small files; v1 reads three plus one /proc/<pid>/stat
// per process (v1's cpu hierarchy has no usage counter, and cpuacct is a separate hierarchy on many
// hosts that the sandbox is not placed in: joining it would cost every exec another v1
// cgroup.procs write). The workspace is one statfs: the image is a sized filesystem, so it is
// O(1), never a walk of its files (bench/metrics.ts measures the whole tick).
import fs from "node:fs";
import path from "node:path";
import type { ResourceReading } from "../core/types.ts";
import { type CgroupDirs, type CgroupLayout, cgroupPids } from "./cgroups.ts";

/** What the reading needs of a slot (slot.ts), so it can be read without one in tests. */
export interface ResourceTarget {
  id: string;
  owner: string;
  dirs: CgroupDirs;
  /** the helper's host pid: /workspace is mounted in its mount namespace */
  helperPid?: number;
  cpuLimitMillis: number;
  memoryLimitBytes: number;
  pidsLimit: number;
  workspaceBytes: number;
}

/** Clock ticks per second of /proc/<pid>/stat times: 100 on every Linux this runs on (USER_HZ). */
const USER_HZ = 100;

export async function readSandboxResources(layout: CgroupLayout, t: ResourceTarget): Promise<ResourceReading> {
  const r: ResourceReading = {
    id: t.id,
    owner: t.owner,
    cpuLimitMillis: t.cpuLimitMillis,
    memoryLimitBytes: t.memoryLimitBytes,
    pidsLimit: t.pidsLimit,
    workspaceBytes: t.workspaceBytes,
  };
  const v2 = layout.version === 2;
  const memDir = v2 ? t.dirs.unified : t.dirs.memory;
  const [usage, stat, pids, cpu, ws] = await Promise.all([
    readNumber(path.join(memDir, v2 ? "memory.current" : "memory.usage_in_bytes")),
    readOr(path.join(memDir, "memory.stat")),
    readNumber(path.join(v2 ? t.dirs.unified : t.dirs.pids, "pids.current")),
    v2 ? cpuV2(t.dirs.unified) : cpuFromProc(layout, t.dirs),
    t.helperPid ? workspaceUsed(t.helperPid) : Promise.resolve(undefined),
  ]);
  r.memoryBytes = usage;
  if (usage !== undefined && stat !== undefined) {
    const cache = statField(stat, v2 ? "file" : "total_cache");
    const inactive = statField(stat, v2 ? "inactive_file" : "total_inactive_file");
    if (cache !== undefined) r.memoryCacheBytes = cache;
    if (inactive !== undefined) r.memoryWorkingSetBytes = Math.max(0, usage - inactive);
  }
  r.pids = pids;
  r.cpuUsageUsec = cpu;
  r.workspaceUsedBytes = ws;
  return r;
}

async function cpuV2(dir: string): Promise<number | undefined> {
  const stat = await readOr(path.join(dir, "cpu.stat"));
  return stat === undefined ? undefined : statField(stat, "usage_usec");
}

/**
 * v1: user + system time of every process in the sandbox, with what their reaped children used
 * (cutime, cstime). The helper is PID 1 and reaps what is orphaned, so a process's time stays in
 * the total after it ends; a child not yet reaped is missed until it is.
 */
async function cpuFromProc(layout: CgroupLayout, dirs: CgroupDirs): Promise<number | undefined> {
  const pids = cgroupPids(layout, dirs);
  if (pids.length === 0) return undefined;
  let ticks = 0;
  await Promise.all(
    pids.map(async (pid) => {
      const stat = await readOr(`/proc/${pid}/stat`);
      if (!stat) return; // ended meanwhile
      // fields after the command name, which may hold spaces and parentheses: split after the last ')'
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // utime, stime, cutime, cstime are fields 14-17 of the line, 12-15 after the name
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    }),
  );
  return (ticks * 1_000_000) / USER_HZ;
}

/** Bytes in use on the sandbox's /workspace, through its helper's view of the mounts. */
async function workspaceUsed(helperPid: number): Promise<number | undefined> {
  try {
    const s = await fs.promises.statfs(`/proc/${helperPid}/root/workspace`);
    return (s.blocks - s.bfree) * s.bsize;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // the sandbox ended between the listing and this read
    if (code === "ENOENT" || code === "ESRCH") return undefined;
    throw err;
  }
}

function statField(text: string, key: string): number | undefined {
  const m = new RegExp(`(?:^|\\n)${key} (\\d+)`).exec(text);
  return m ? Number(m[1]) : undefined;
}

async function readNumber(file: string): Promise<number | undefined> {
  const s = await readOr(file);
  if (s === undefined) return undefined;
  const n = Number(s.trim());
  return Number.isFinite(n) ? n : undefined;
}

/** The file's text, or undefined when it (its cgroup, its process) is gone. */
async function readOr(file: string): Promise<string | undefined> {
  try {
    return await fs.promises.readFile(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ESRCH" || code === "ENODEV") return undefined;
    throw err;
  }
}
