// Processes that belong to a control plane's run directory, found in /proc: those whose command
// line or working directory names a path under it (the components, the pods' bubblewrap
// sandboxes, whose command lines bind the pod directories), and every process in the PID
// namespace of such a sandbox (its command, e.g. a `sleep`, names nothing of ours). The stop
// kills them all after the components it started have stopped, so nothing outlives a run even
// when a component leaked it; the suite's teardown reports them as a failure (test/setup).
//
// Not the environment: the test runner and its workers carry SBX_TEST_KUBECONFIG, a path in
// the run directory, and must not be killed by their own teardown.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";

export interface Leftover {
  pid: number;
  /** the command line, space-separated */
  command: string;
  /** what tied it to the directory: `cmdline`, `cwd`, or `pid namespace of <pid>` */
  why: string;
  /** the first path under the directories it names (for a namespace member: its owner's) */
  path: string;
}

function read(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return ""; // exited meanwhile, or a kernel thread
  }
}

function link(path: string): string {
  try {
    return readlinkSync(path);
  } catch {
    return "";
  }
}

function pids(): number[] {
  return readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .map(Number);
}

/** The PIDs of this process and its ancestors: never a leftover of the run they drive. */
function selfAndAncestors(): Set<number> {
  const out = new Set<number>();
  for (let pid = process.pid; pid > 1 && !out.has(pid); ) {
    out.add(pid);
    const stat = read(`/proc/${pid}/stat`);
    pid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  }
  return out;
}

/** Every live process tied to one of `dirs` (absolute paths), this process and its ancestors excepted. */
export function processesUnder(dirs: string[]): Leftover[] {
  const prefixes = dirs.map((d) => join(d, "/"));
  /** the first path under a prefix in s (NUL- or space-separated words), or "" */
  const under = (s: string): string => {
    for (const word of s.split(/[\0\s=]/))
      for (const p of prefixes) {
        const at = word.indexOf(p);
        if (at >= 0) return word.slice(at);
        if (`${word}/` === p) return word;
      }
    return "";
  };
  const skip = selfAndAncestors();
  const hostNs = link("/proc/self/ns/pid");
  const found = new Map<number, Leftover>();
  const sandboxNs = new Map<string, number>();
  const all = pids().filter((p) => !skip.has(p));
  for (const pid of all) {
    const cmdline = read(`/proc/${pid}/cmdline`);
    if (cmdline === "") continue; // a zombie or a kernel thread: nothing to kill
    const command = cmdline.replaceAll("\0", " ").trim();
    const inCmdline = under(cmdline);
    const path = inCmdline || under(link(`/proc/${pid}/cwd`));
    if (!path) continue;
    found.set(pid, { pid, command, why: inCmdline ? "cmdline" : "cwd", path });
    const ns = link(`/proc/${pid}/ns/pid`);
    if (ns && ns !== hostNs && !sandboxNs.has(ns)) sandboxNs.set(ns, pid);
  }
  for (const pid of all) {
    if (found.has(pid)) continue;
    const owner = sandboxNs.get(link(`/proc/${pid}/ns/pid`));
    const cmdline = read(`/proc/${pid}/cmdline`);
    if (owner === undefined || cmdline === "") continue;
    const command = cmdline.replaceAll("\0", " ").trim();
    found.set(pid, { pid, command, why: `pid namespace of ${owner}`, path: found.get(owner)!.path });
  }
  return [...found.values()].sort((a, b) => a.pid - b.pid);
}

function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * SIGKILLs every process tied to `dirs`, again until none is left or `waitMs` has passed
 * (synchronous: it also runs from exit handlers). Answers what it found the first time.
 */
export function killProcessesUnder(dirs: string[], waitMs = 3_000): Leftover[] {
  const first = processesUnder(dirs);
  const deadline = Date.now() + waitMs;
  for (let left = first; left.length > 0 && Date.now() < deadline; left = processesUnder(dirs)) {
    for (const p of left) {
      try {
        process.kill(p.pid, "SIGKILL");
      } catch {
        // exited meanwhile
      }
    }
    pause(50);
  }
  return first;
}

/** One line per process, for an error message. */
export function describeLeftovers(left: Leftover[]): string {
  return left.map((p) => `  pid ${p.pid} (${p.why}): ${p.command.slice(0, 300)}`).join("\n");
}
