// Exec in a local sandbox: one connection to the helper per command, the command in its own
// cgroup (so kill and timeout end every process it started, and an OOM kill is attributed to it).
import crypto from "node:crypto";
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { ConflictError, UpstreamError, ValidationError } from "../core/errors.ts";
import type { ExecRequest, ExecResult, ExecSession } from "../core/types.ts";
import { childDirs, killCgroup, oomKills, removeCgroup, type CgroupLayout } from "./cgroups.ts";
import { IN_SANDBOX } from "./launch.ts";
import { helperExec } from "./protocol.ts";
import type { Slot } from "./slot.ts";

/** exit code of a command ended by its timeout, as coreutils `timeout` does */
export const TIMEOUT_EXIT_CODE = 124;

const BASE_ENV: Record<string, string> = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  HOME: IN_SANDBOX.workspace,
  LANG: "C.UTF-8",
};

export function validateExecRequest(req: ExecRequest): void {
  if (!Array.isArray(req.command) || req.command.length === 0 || req.command.some((a) => typeof a !== "string")) {
    throw new ValidationError("command", req.command, "give the command as a non-empty array of strings, e.g. [\"sh\", \"-c\", \"echo hi\"]");
  }
  if (req.cwd !== undefined && !req.cwd.startsWith("/")) throw new ValidationError("cwd", req.cwd, "use an absolute path inside the sandbox, e.g. /workspace");
  if (req.timeoutMs !== undefined && !(Number.isFinite(req.timeoutMs) && req.timeoutMs > 0)) {
    throw new ValidationError("timeoutMs", req.timeoutMs, "use a positive number of milliseconds");
  }
}

export async function execInSlot(layout: CgroupLayout, slot: Slot, sandboxId: string, req: ExecRequest, onSandboxGone: () => Error): Promise<ExecSession> {
  validateExecRequest(req);
  const t0 = performance.now();
  const cgroup = "x" + crypto.randomBytes(6).toString("hex");
  const dirs = childDirs(slot.dirs, cgroup);
  const env = { ...BASE_ENV, SBX_SANDBOX_ID: sandboxId, ...slot.rec.env, ...req.env };
  const cwd = req.cwd ?? IN_SANDBOX.workspace;
  const h = helperExec(slot.paths.socket, { cgroup, cwd, argv: req.command, env }, req.stdin);
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  // the result waits for a kill to finish: "ended" means every process of the command is gone
  let killing: Promise<unknown> | undefined;
  const killAll = () => {
    killing ??= killCgroup(layout, dirs).catch(() => {});
  };
  if (req.timeoutMs !== undefined) {
    timer = setTimeout(() => {
      timedOut = true;
      killAll();
    }, req.timeoutMs);
  }
  const start = await h.started;
  if (start.kind === "failed") {
    clearTimeout(timer);
    h.destroy();
    removeCgroup(dirs);
    if (start.stage === "exec") return finishedSession(req.command[0], start.errno, performance.now() - t0);
    if (start.stage === "chdir") throw new ValidationError("cwd", cwd, `cannot change into it inside the sandbox (${start.message}); create it first or use ${IN_SANDBOX.workspace}`);
    if (slot.state === "dead") throw onSandboxGone();
    if (start.stage === "fork" || start.errno === 11) {
      throw new ConflictError(`sandbox ${sandboxId} is at its process limit (pids ${slot.rec.size.pids}): ${start.message}; wait for processes to exit or kill them`, { id: sandboxId });
    }
    throw new UpstreamError(`sandbox ${sandboxId}: the helper could not start the command at ${start.stage}: ${start.message}`, { id: sandboxId });
  }
  const result = h.exited.then(async (exit): Promise<ExecResult> => {
    clearTimeout(timer);
    const durationMs = Math.round(performance.now() - t0);
    await killing;
    const oomKilled = oomKills(layout, dirs) > 0;
    if (exit.kind === "lost") {
      if (slot.state === "dead" || slot.stopping) throw onSandboxGone();
      throw new UpstreamError(`sandbox ${sandboxId}: lost the connection to the helper while the command ran`, { id: sandboxId });
    }
    // background processes the command left behind keep its cgroup busy; it goes with the sandbox
    removeCgroup(dirs);
    const exitCode = timedOut ? TIMEOUT_EXIT_CODE : exit.kind === "exit" ? exit.code : 128 + exit.signal;
    return { exitCode, timedOut, oomKilled, durationMs };
  });
  result.catch(() => {});
  return { stdout: h.stdout, stderr: h.stderr, result, kill: killAll };
}

/** A command that could not be executed ends like it would in a shell: 127 not found, 126 not executable. */
function finishedSession(command: string, errno: number, ms: number): ExecSession {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const notFound = errno === 2;
  stderr.end(`sbx: ${command}: ${notFound ? "command not found" : `cannot execute (errno ${errno})`}\n`);
  stdout.end();
  return { stdout, stderr, result: Promise.resolve({ exitCode: notFound ? 127 : 126, timedOut: false, oomKilled: false, durationMs: Math.round(ms) }), kill: () => {} };
}
