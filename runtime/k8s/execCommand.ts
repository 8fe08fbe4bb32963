// How a sandbox exec request becomes the argv sent to the Kubernetes exec API. Pure.
// The exec API takes only argv: no env, no cwd, no timeout. So a tiny POSIX sh wrapper
// changes directory, sets the environment and runs the command under `timeout -s KILL`,
// which puts the command in its own process group and kills the whole group when time is up
// (a plain kill of the direct child would leave its background processes running).
// The wrapper also exports SBX_EXEC_ID=<id> before `timeout`, so `timeout`, the command and
// everything it starts carry that marker in their environment: closing the exec stream does
// not end the command on a real kubelet, and the marker is how execKill.ts finds it.
import { ValidationError } from "../core/errors.ts";
import type { ExecRequest } from "../core/types.ts";
import { WORKSPACE_DIR } from "./podTemplate.ts";

const WRAPPER =
  'cd -- "$1" || exit 126; SBX_EXEC_ID="$2"; export SBX_EXEC_ID; t="$3"; shift 3; exec timeout -s KILL "$t" env "$@"';
/** the environment variable that marks every process of one exec (see execKill.ts) */
export const EXEC_ID_VAR = "SBX_EXEC_ID";
const EXEC_ID = /^[A-Za-z0-9_-]{8,64}$/;

/**
 * What only this backend refuses, on top of the Manager's one check (core/execInput.ts, which
 * has already refused an empty command, bad env names and a relative cwd): the marker variable
 * is the runtime's (in the request's env or the sandbox's), and `env` would read a program name with '=' as an assignment. Checked once
 * per exec, before the channel or the websocket path is chosen, so both refuse the same requests.
 */
export function validateWrapperExec(req: Pick<ExecRequest, "command" | "env">, baseEnv: Record<string, string>): void {
  if (Object.hasOwn(baseEnv, EXEC_ID_VAR) || (req.env && Object.hasOwn(req.env, EXEC_ID_VAR)))
    throw new ValidationError(
      `env.${EXEC_ID_VAR}`,
      EXEC_ID_VAR,
      `${EXEC_ID_VAR} is set by the runtime to find an exec's processes when it is killed; use another name`,
    );
  // `env` treats a first word containing '=' as an assignment; `--` is not portable across
  // env implementations, so a command whose program name contains '=' is refused instead.
  if (req.command[0]?.includes("="))
    throw new ValidationError("command[0]", req.command[0], "the program name must not contain '='");
}

/**
 * argv for `sh -c WRAPPER sbx-exec <cwd> <exec id> <seconds> [K=V ...] <command...>`, for a
 * request already validated (Manager.exec, then validateWrapperExec).
 */
export function buildExecArgv(req: ExecRequest, baseEnv: Record<string, string>, execId: string): string[] {
  if (!EXEC_ID.test(execId))
    throw new ValidationError("execId", execId, "use 8-64 letters, digits, '-' or '_' (newExecId() makes one)");
  const env = { ...baseEnv, ...(req.env ?? {}) };
  const cwd = req.cwd ?? WORKSPACE_DIR;
  const seconds = timeoutSeconds(req.timeoutMs);
  const pairs = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  return ["sh", "-c", WRAPPER, "sbx-exec", cwd, execId, seconds, ...pairs, ...req.command];
}

/** `timeout` takes fractional seconds; 0 disables it. Rounded up so a timeout never fires early. */
export function timeoutSeconds(timeoutMs: number | undefined): string {
  if (timeoutMs === undefined || timeoutMs <= 0) return "0";
  return (Math.ceil(timeoutMs) / 1000).toFixed(3).replace(/\.?0+$/, "");
}

/**
 * `timeout -s KILL` kills its own process group too, so a timed-out command ends with 137,
 * the same code as an OOM kill. What tells them apart is the clock: 137 after at least
 * the timeout means the timeout fired.
 */
export function classifyExit(
  exitCode: number,
  durationMs: number,
  timeoutMs: number | undefined,
  killedByCaller: boolean,
): { exitCode: number; timedOut: boolean; oomKilled: boolean } {
  const timedOut = exitCode === 137 && !!timeoutMs && timeoutMs > 0 && durationMs >= timeoutMs;
  if (timedOut) return { exitCode: 124, timedOut: true, oomKilled: false };
  return { exitCode, timedOut: false, oomKilled: exitCode === 137 && !killedByCaller };
}

/** Exit code from the exec status channel's V1Status. */
export function exitCodeFromStatus(status: {
  status?: string;
  reason?: string;
  message?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}): number | Error {
  if (status.status === "Success") return 0;
  if (status.reason === "NonZeroExitCode") {
    const cause = status.details?.causes?.find((c) => c.reason === "ExitCode");
    const code = Number(cause?.message);
    if (Number.isInteger(code)) return code;
  }
  return new Error(status.message || `exec failed: ${JSON.stringify(status)}`);
}
