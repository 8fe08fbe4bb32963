// Exec in a local sandbox: one connection to the helper per command, the command in its own
// cgroup (so kill and timeout end every process it started, and an OOM kill is attributed to it).
import crypto from "node:crypto";
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { CapacityError, UpstreamError, ValidationError } from "../core/errors.ts";
import { DEFAULT_TERM } from "../core/execInput.ts";
import type { Logger } from "../core/log.ts";
import type { ExecRequest, ExecResult, ExecSession } from "../core/types.ts";
import {
  type CgroupDirs,
  type CgroupLayout,
  childDirs,
  killCgroup,
  oomKills,
  readPids,
  removeCgroup,
  shouldBlamePidsLimit,
} from "./cgroups.ts";
import { IN_SANDBOX } from "./launch.ts";
import { type HelperExec, helperExec } from "./protocol.ts";
import type { Slot } from "./slot.ts";

/** exit code of a command ended by its timeout, as coreutils `timeout` does */
export const TIMEOUT_EXIT_CODE = 124;

const BASE_ENV: Record<string, string> = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  HOME: IN_SANDBOX.workspace,
  LANG: "C.UTF-8",
};

// Over 60 lines on purpose: start slot, helper start, timer and ender are wired to each other in this order.
export async function execInSlot(
  layout: CgroupLayout,
  slot: Slot,
  sandboxId: string,
  req: ExecRequest,
  onSandboxGone: () => Error,
  log?: Logger,
): Promise<ExecSession> {
  const t0 = performance.now();
  const cgroup = `x${crypto.randomBytes(6).toString("hex")}`;
  const dirs = childDirs(slot.dirs, cgroup);
  const env = {
    ...BASE_ENV,
    ...(req.pty ? { TERM: DEFAULT_TERM } : {}),
    SBX_SANDBOX_ID: sandboxId,
    ...slot.rec.env,
    ...req.env,
  };
  const cwd = req.cwd ?? IN_SANDBOX.workspace;
  const entered = slot.starts.enter();
  if (!entered) {
    const { starting, waiting } = slot.starts;
    throw busyError(sandboxId, `${starting} commands are starting and ${waiting} more wait to`);
  }
  const releaseStart = await entered;
  const pidsBefore = readPids(layout, slot.dirs);
  const h = helperExec(slot.paths.socket, { cgroup, cwd, argv: req.command, env, pty: req.pty }, req.stdin);
  const ender = commandEnder(layout, dirs, h, (err) =>
    log?.warn(
      { sandbox: sandboxId, op: "exec", cgroup, err },
      "could not confirm the command's processes are gone; dropped its helper connection so the relay kills its group",
    ),
  );
  const timer = req.timeoutMs === undefined ? undefined : setTimeout(() => ender.end("timeout"), req.timeoutMs);
  const start = await h.started;
  releaseStart();
  if (start.kind === "failed") {
    clearTimeout(timer);
    h.destroy();
    removeCgroup(dirs);
    if (start.stage === "exec") return finishedSession(req.command[0], start.errno, performance.now() - t0);
    if (start.stage === "chdir")
      throw new ValidationError(
        "cwd",
        cwd,
        `cannot change into it inside the sandbox (${start.message}); create it first or use ${IN_SANDBOX.workspace}`,
      );
    if (slot.state === "dead") throw onSandboxGone();
    const lostAtLimit = start.stage === "connect" && shouldBlamePidsLimit(pidsBefore, readPids(layout, slot.dirs));
    if (start.stage === "fork" || start.errno === 11 || lostAtLimit)
      throw pidsLimitError(sandboxId, slot.rec.size.pids, start.message);
    if (start.code === "EAGAIN") throw busyError(sandboxId, `its helper's accept queue stayed full (${start.message})`);
    throw new UpstreamError(
      `sandbox ${sandboxId}: the helper could not start the command at ${start.stage}: ${start.message}`,
      { id: sandboxId },
    );
  }
  const result = h.exited.then(async (exit): Promise<ExecResult> => {
    clearTimeout(timer);
    const durationMs = Math.round(performance.now() - t0);
    const ended = await ender.ended();
    const oomKilled = oomKills(layout, dirs) > 0;
    if (exit.kind === "lost") {
      if (slot.state === "dead" || slot.stopping) throw onSandboxGone();
      throw new UpstreamError(`sandbox ${sandboxId}: lost the connection to the helper while the command ran`, {
        id: sandboxId,
      });
    }
    // background processes the command left behind keep its cgroup busy; it goes with the sandbox
    removeCgroup(dirs);
    const timedOut = ended === "timeout";
    const exitCode = timedOut ? TIMEOUT_EXIT_CODE : exit.kind === "exit" ? exit.code : 128 + exit.signal;
    return { exitCode, timedOut, oomKilled, durationMs };
  });
  result.catch(() => {});
  const session: ExecSession = { stdout: h.stdout, stderr: h.stderr, result, kill: () => ender.end("kill") };
  if (req.pty) {
    session.resize = (size) => h.resize(size.cols, size.rows);
    session.signal = (sig) => h.signal(sig);
  }
  return session;
}

export function pidsLimitError(sandboxId: string, pids: number, detail: string): CapacityError {
  return new CapacityError(
    `sandbox ${sandboxId} is at its pids limit (${pids}): ${detail}; each running command holds its own processes plus one helper process: retry when some have exited, kill them, or use a larger size`,
    1,
    { id: sandboxId, pids },
  );
}

/** Capacity, not a fault: the sandbox's helper starts commands one at a time and a burst is over its queue. */
export function busyError(sandboxId: string, detail: string): CapacityError {
  return new CapacityError(
    `sandbox ${sandboxId} is busy: ${detail}; retry after the Retry-After delay, or send fewer commands at once`,
    1,
    { id: sandboxId },
  );
}

type EndReason = "timeout" | "kill";

/**
 * Ends a command on timeout or kill(): waits until the command has started (a deadline can
 * pass while the helper is still forking it, and its cgroup is only complete once it runs),
 * releases the connection (so the relay can go on, report and exit even when nobody reads the
 * output any more), then kills its cgroup and confirms it is empty. ended() says why the command
 * ended once that is done: the reason of the first end() that found it running, or undefined
 * when it exited on its own first. A kill that cannot be confirmed drops the connection (the
 * relay then kills the command's group) and the result reports the connection lost, never a
 * timeout.
 */
function commandEnder(layout: CgroupLayout, dirs: CgroupDirs, h: HelperExec, onUnconfirmed: (err?: unknown) => void) {
  let exited = false;
  void h.exited.then(() => (exited = true));
  let ending: Promise<EndReason | undefined> | undefined;
  return {
    end(why: EndReason): void {
      ending ??= h.started.then(async (s) => {
        if (s.kind !== "started" || exited) return undefined;
        // unblock the relay first: a command stuck on an output pipe the relay holds cannot die
        h.release();
        let failure: unknown;
        const gone = await killCgroup(layout, dirs).catch((err) => {
          failure = err;
          return false;
        });
        if (!gone) {
          onUnconfirmed(failure);
          h.destroy();
          return undefined;
        }
        return why;
      });
    },
    ended: async () => ending,
  };
}

/** A command that could not be executed ends like it would in a shell: 127 not found, 126 not executable. */
function finishedSession(command: string, errno: number, ms: number): ExecSession {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const notFound = errno === 2;
  stderr.end(`sbx: ${command}: ${notFound ? "command not found" : `cannot execute (errno ${errno})`}\n`);
  stdout.end();
  return {
    stdout,
    stderr,
    result: Promise.resolve({
      exitCode: notFound ? 127 : 126,
      timedOut: false,
      oomKilled: false,
      durationMs: Math.round(ms),
    }),
    kill: () => {},
  };
}
