// Child processes of the test control plane: started with their output in a log file,
// tracked by PID, and stopped by PID (TERM, then KILL) in reverse start order; then whatever
// is still tied to the run's directory (a process one of them started and leaked) is killed.
import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, createWriteStream, readFileSync } from "node:fs";
import { join } from "node:path";
import { killProcessesUnder, type Leftover } from "./leftovers.ts";

export interface Started {
  name: string;
  pid: number;
  logPath: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

export class ProcessGroup {
  private readonly started: Started[] = [];
  /** Synchronous clean-ups run after every process has stopped (e.g. the pod network). */
  private readonly cleanups: (() => void)[] = [];
  /**
   * What the stop found still alive under the swept directory once every started process had
   * stopped, and killed: a leak of one of them (the suite's teardown fails on it).
   */
  readonly leftovers: Leftover[] = [];

  /** Logs go to `logDir`; every PID is also appended to `pidsFile` (see test/setup/reap.ts). */
  constructor(
    private readonly logDir: string,
    private readonly pidsFile: string,
  ) {}

  start(name: string, command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Started {
    const logPath = join(this.logDir, `${name}.log`);
    const log = createWriteStream(logPath, { flags: "a" });
    // Its own process group: a terminal's Ctrl-C reaches only our process, which stops these
    // in order (the demo's `pulumi destroy` needs the cluster alive); every owner kills them
    // by PID on its signals and at exit.
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    // Both streams share one file, so neither may end it; it is closed once the child's
    // stdio has closed, and `exited` resolves after the log is flushed (for error messages).
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    const exited = new Promise<number | null>((resolve) => {
      const finish = (code: number | null) => log.end(() => resolve(code));
      child.once("close", (code, signal) => finish(code ?? (signal ? -1 : null)));
      child.once("error", (err) => {
        log.write(`\nspawn failed: ${err.message}\n`);
        finish(-1);
      });
    });
    if (child.pid === undefined) {
      throw new Error(`control plane: could not start ${name} (${command}); see ${logPath}`);
    }
    appendFileSync(this.pidsFile, `${child.pid}\n`);
    const entry = { name, pid: child.pid, logPath, child, exited };
    this.started.push(entry);
    return entry;
  }

  /** PIDs still believed alive, for the synchronous SIGINT/exit safety net. */
  pids(): number[] {
    return this.started.filter((s) => s.child.exitCode === null && s.child.signalCode === null).map((s) => s.pid);
  }

  /** Registers a synchronous clean-up for after the processes (stopAll and killAllNow). */
  onStopped(fn: () => void): void {
    this.cleanups.push(fn);
  }

  /**
   * After the processes stop (before the clean-ups registered until now), kills every process
   * still tied to `dir` (leftovers.ts) and records it in `leftovers`.
   */
  sweepOnStop(dir: string): void {
    this.onStopped(() => this.leftovers.push(...killProcessesUnder([dir])));
  }

  private runCleanups(): void {
    for (const fn of this.cleanups.splice(0).reverse()) fn();
  }

  killAllNow(): void {
    for (const pid of this.pids().reverse()) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    this.runCleanups();
  }

  async stopAll(graceMs = 5_000): Promise<void> {
    for (const s of [...this.started].reverse()) {
      if (s.child.exitCode !== null || s.child.signalCode !== null) continue;
      try {
        process.kill(s.pid, "SIGTERM");
      } catch {
        continue;
      }
      const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), graceMs).unref());
      if ((await Promise.race([s.exited, timer])) === "timeout") {
        try {
          process.kill(s.pid, "SIGKILL");
        } catch {
          // exited between the check and the kill
        }
        await s.exited;
      }
    }
    this.started.length = 0;
    this.runCleanups();
  }
}

export function tailLog(path: string, lines = 25): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

export { freePort } from "../../runtime/core/ports.ts";

/**
 * Polls `probe` until it returns true. Fails fast, with the component's log tail, when the
 * process exits; otherwise fails after `timeoutMs` naming what was awaited.
 */
export async function waitUntil(
  what: string,
  proc: Started | undefined,
  probe: () => Promise<boolean>,
  fix: string,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "";
  let exitCode: number | null | undefined;
  void proc?.exited.then((c) => (exitCode = c));
  while (Date.now() < deadline) {
    if (exitCode !== undefined) {
      throw new Error(
        `control plane: ${proc?.name} exited (code ${exitCode}) before ${what}. ${fix}\n` +
          `--- last lines of ${proc?.logPath} ---\n${tailLog(proc?.logPath ?? "")}`,
      );
    }
    try {
      if (await probe()) return;
    } catch (err) {
      lastError = err instanceof Error ? err.message : String(err);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const log = proc ? `\n--- last lines of ${proc.logPath} ---\n${tailLog(proc.logPath)}` : "";
  throw new Error(`control plane: timed out after ${timeoutMs}ms waiting for ${what} (${lastError}). ${fix}${log}`);
}
