// Killing a Kubernetes exec. Closing the exec stream does not end the command on a real node:
// the kubelet with containerd or CRI-O leaves it running in the container. So kill() closes
// the stream and then runs a second exec in the same container that SIGKILLs every process
// carrying this exec's marker in its environment (SBX_EXEC_ID, exported by the wrapper of
// execCommand.ts before `timeout`), and the whole process group of each marked group leader
// (`timeout` leads the command's group, so a child that cleared its environment but stayed
// in the group dies too). It scans again until no marked process is left (a fork racing the
// first scan), at most KILL_ROUNDS times.
//
// What escapes it: a process that both left the group (setsid) and dropped the marker from its
// environment; the `timeout` deadline and the pod's lifetime still bound those.
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { ExecResult, ExecSession } from "../core/types.ts";
import { EXEC_ID_VAR } from "./execCommand.ts";

const KILL_ROUNDS = 5;
/** default bound on the kill exec, opening the stream included */
export const KILL_TIMEOUT_MS = 10_000;

// POSIX sh, coreutils or busybox: /proc/<pid>/environ is NUL-separated, so `tr` makes it lines
// and `grep -x` matches the whole `NAME=value` entry. Field 5 of /proc/<pid>/stat is the
// process group; stripping up to ") " skips the command name, which may contain spaces.
const KILL_SCRIPT = `m="${EXEC_ID_VAR}=$1"
for round in ${Array.from({ length: KILL_ROUNDS }, (_, i) => i + 1).join(" ")}; do
  found=
  for d in /proc/[0-9]*; do
    { tr '\\0' '\\n' < "$d/environ" | grep -qxF -e "$m"; } 2>/dev/null || continue
    p=\${d#/proc/}
    found="$found $p"
    set -- $(sed 's/.*) //' "$d/stat" 2>/dev/null)
    [ "\${3:-}" = "$p" ] && kill -9 -"$p" 2>/dev/null
  done
  [ -n "$found" ] || exit 0
  kill -9 $found 2>/dev/null
  echo "round $round killed:$found"
done
echo "processes marked $m were still starting after ${KILL_ROUNDS} rounds" >&2
exit 1`;

/** a fresh marker for one exec: 96 random bits, so no two execs of a pod share one */
export function newExecId(): string {
  return randomBytes(12).toString("hex");
}

/** argv of the exec that kills every process of exec `execId` (run without the exec wrapper) */
export function buildKillArgv(execId: string): string[] {
  return ["sh", "-c", KILL_SCRIPT, "sbx-kill", execId];
}

/**
 * The result of an exec the caller killed. The kill exec may end the command before the closed
 * stream is noticed, so its status can arrive: a 137 then is the caller's kill, not an OOM, and
 * a "timed out" before the timeout was due (timeout's group killed from outside) is too.
 */
export function resolveKilledResult(r: ExecResult, timeoutMs: number | undefined): ExecResult {
  const timeoutDue = !!timeoutMs && timeoutMs > 0 && r.durationMs >= timeoutMs;
  if (r.timedOut && !timeoutDue) return { exitCode: 137, timedOut: false, oomKilled: false, durationMs: r.durationMs };
  return r.exitCode === 137 ? { ...r, oomKilled: false } : r;
}

export interface ExecKillOptions {
  /** the exec's marker, as given to buildExecArgv */
  execId: string;
  /** the exec's own timeout, to tell the caller's kill from a timeout */
  timeoutMs?: number;
  /** starts argv in the same container, as is (no wrapper) */
  run(argv: string[]): Promise<ExecSession>;
  clock: Clock;
  logger: Logger;
  /** bound on the kill exec; default KILL_TIMEOUT_MS */
  killTimeoutMs?: number;
}

/**
 * `session` with a kill() that also ends every process the command started. kill() never
 * throws and returns at once; `result` settles once the kill exec has finished or gave up,
 * so a caller that saw the result knows the processes are gone (or that it was logged why not).
 * A timed-out command gets the same kill exec before its result is reported.
 */
export function withProcessKill(session: ExecSession, opts: ExecKillOptions): ExecSession {
  let finished = false;
  let killing: Promise<void> | undefined;
  session.result.then(
    () => (finished = true),
    () => (finished = true),
  );
  const result = session.result.then(async (r) => {
    // A command reported as timed out must be dead. `timeout -s KILL` kills its process group,
    // but a process that left the group (setsid) outlives it, and the local deadline only
    // closes the stream, which a kubelet does not take as a kill: sweep by marker first.
    if (!killing && r.timedOut) killing = killProcesses(opts);
    if (!killing) return r;
    await killing;
    return resolveKilledResult(r, opts.timeoutMs);
  });
  result.catch(() => undefined); // as with exec.ts: the rejection is the caller's to observe
  return {
    stdout: session.stdout,
    stderr: session.stderr,
    result,
    kill: () => {
      if (killing) return;
      // a command that already ended has nothing left to kill: spare the second exec
      const alive = !finished;
      killing = alive ? killProcesses(opts) : Promise.resolve();
      session.kill();
    },
  };
}

async function killProcesses(opts: ExecKillOptions): Promise<void> {
  const log = opts.logger.child({ op: "exec-kill", execId: opts.execId });
  const bound = opts.killTimeoutMs ?? KILL_TIMEOUT_MS;
  const gaveUp = new AbortController();
  let killer: ExecSession | undefined;
  const work = (async () => {
    killer = await opts.run(buildKillArgv(opts.execId));
    if (gaveUp.signal.aborted) return killer.kill(); // opened after we gave up: leave nothing behind
    const [out, err, r] = await Promise.all([text(killer.stdout), text(killer.stderr), killer.result]);
    if (r.exitCode !== 0)
      log.warn(
        { exitCode: r.exitCode, stderr: err.trim() },
        "the kill exec did not confirm every process of the exec is gone",
      );
    else log.debug({ killed: out.trim() }, "killed the exec's processes");
  })();
  const timer = opts.clock.sleep(bound, gaveUp.signal).then(
    () => "timed out" as const,
    () => "done" as const,
  );
  try {
    const outcome = await Promise.race([work.then(() => "done" as const), timer]);
    if (outcome === "timed out") {
      killer?.kill();
      work.catch(() => undefined);
      log.warn(
        { timeoutMs: bound },
        "the kill exec did not finish in time; the exec's timeout and the pod's lifetime still bound its processes",
      );
    }
  } catch (err) {
    log.warn(
      { err: err instanceof Error ? err.message : String(err) },
      "could not run the kill exec; the exec's timeout and the pod's lifetime still bound its processes",
    );
  } finally {
    gaveUp.abort();
  }
}

async function text(stream: Readable): Promise<string> {
  let s = "";
  for await (const c of stream) s += Buffer.isBuffer(c) ? c.toString("utf8") : String(c);
  return s;
}
