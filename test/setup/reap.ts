// Safety net for runs that died without teardown (the runner was SIGKILLed): each run dir
// records its owner's PID and its children's PIDs; a later run stops the children of runs
// whose owner is gone, then every process still tied to the directory (leftovers.ts), and
// removes the directories. A PID is only signalled when its command line still names that run's
// directory (or it is in the PID namespace of one that does), so a reused PID is never hit.
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { killProcessesUnder } from "../../tools/control-plane/leftovers.ts";

export const RUN_DIR_PREFIX = "sbx-control-plane-";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

export function reapStaleRuns(tmp: string): string[] {
  const reaped: string[] = [];
  for (const entry of readdirSync(tmp)) {
    if (!entry.startsWith(RUN_DIR_PREFIX)) continue;
    const dir = join(tmp, entry);
    const ownerFile = join(dir, "owner.pid");
    if (!existsSync(ownerFile)) continue; // not ours, or still being created
    const owner = Number(readFileSync(ownerFile, "utf8"));
    if (alive(owner) && cmdline(owner).includes("node")) continue;
    const pidsFile = join(dir, "pids");
    const pids = existsSync(pidsFile) ? readFileSync(pidsFile, "utf8").split("\n").filter(Boolean).map(Number) : [];
    for (const pid of pids) {
      if (alive(pid) && cmdline(pid).includes(dir)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // exited meanwhile
        }
      }
    }
    // what those left: a sandbox whose bubblewrap outlived its kubelet names the run's pods dir
    killProcessesUnder([dir]);
    rmSync(dir, { recursive: true, force: true });
    reaped.push(dir);
  }
  return reaped;
}
