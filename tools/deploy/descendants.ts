// The demo's last stop step: whatever still runs below it (a `pulumi destroy` that was
// skipped or timed out, with its provider plugin; a port-forward that ignored SIGTERM) is
// killed, so Ctrl-C leaves no process behind. Read from /proc, Linux only, as the demo is.
import { readdirSync, readFileSync } from "node:fs";

/** The parent PID from /proc/<pid>/stat; the comm field may hold spaces and parentheses. */
export function parentOf(stat: string): number {
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[1]);
}

/** Every live descendant of `root`, children before their own children. */
export function descendantsOf(root: number, proc = "/proc"): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync(proc)) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`${proc}/${entry}/stat`, "utf8");
    } catch {
      continue; // exited while we listed
    }
    const ppid = parentOf(stat);
    children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    for (const child of children.get(queue.shift() as number) ?? []) {
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

/** SIGKILLs every descendant of `root` (default: this process); returns the PIDs it signalled. */
export function killDescendants(root = process.pid, proc = "/proc"): number[] {
  const pids = descendantsOf(root, proc);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone already
    }
  }
  return pids;
}
