// CPU contention on purpose: `count` busy processes (`yes` under `timeout`) beside whatever fn
// measures, killed after it whatever it does. Each runs in a process group of its own under
// `timeout`, so even a caller that dies before the finally leaves them for `maxSeconds` at most.
// Used by bench/e2b-stream.ts and test/e2b/envd-stream.test.ts.
import { type ChildProcess, spawn } from "node:child_process";

/** Runs fn under the load; rejects if a busy process ended before fn did (the load did not last). */
export async function withBusyProcesses<T>(count: number, maxSeconds: number, fn: () => Promise<T>): Promise<T> {
  const busy: ChildProcess[] = [];
  const killAll = () => {
    for (const c of busy) if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(-c.pid, "SIGKILL");
  };
  process.once("exit", killAll);
  try {
    for (let i = 0; i < count; i++) {
      const c = spawn("timeout", [String(maxSeconds), "yes"], { stdio: "ignore", detached: true });
      busy.push(c);
      await new Promise<void>((resolve, reject) => {
        c.once("spawn", resolve);
        c.once("error", (err) =>
          reject(
            new Error(
              `could not start a busy process (coreutils' timeout and yes; apt-get install coreutils): ${err.message}`,
            ),
          ),
        );
      });
    }
    const out = await fn();
    const ended = busy.filter((c) => c.exitCode !== null || c.signalCode !== null).length;
    if (ended > 0) throw new Error(`${ended} of ${count} busy processes ended before the measured work did`);
    return out;
  } finally {
    killAll();
    process.off("exit", killAll);
  }
}
