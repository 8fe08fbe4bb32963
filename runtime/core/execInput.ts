// What an exec request may carry into a sandbox, checked before anything reaches a backend: NUL
// bytes and the kernel's argument limits otherwise surface late and wrong (an encoder throwing
// a 500, or E2BIG in the sandbox becoming "helper could not start the command: write EPIPE").
// The one check of an exec request: the Manager runs it before any backend sees the request
// (the HTTP route, the E2B layer and the CLI's direct mode all go through Manager.exec); a
// backend adds only what its own transport refuses (k8s/execCommand.ts validateWrapperExec).
// Pure.
import { ValidationError } from "./errors.ts";

/**
 * The numbers, and why:
 * - argStringBytes: Linux refuses any single argv or environment string longer than
 *   MAX_ARG_STRLEN (32 pages = 131072 bytes, counting its terminating NUL) with E2BIG.
 * - totalBytes: argv plus the request's env, each string counted with its NUL. The kernel's
 *   bound is ARG_MAX (a quarter of the stack limit: 2 MiB with the usual 8 MiB stack), which
 *   also has to hold the sandbox's own env (at most 64 KiB, core/spec.ts) and the pointers.
 *   Two transports are tighter: the local helper takes a request of at most 1 MiB, and on
 *   Kubernetes argv travels in the exec URL, URL-encoded (up to 3x) under the API server's
 *   1 MiB header bound. 192 KiB leaves room for all of them: (192 + 64) KiB x 3 < 1 MiB.
 */
export const EXEC_LIMITS = {
  argStringBytes: 131_071,
  totalBytes: 192 * 1024,
  args: 4096,
  envEntries: 128,
  cwdChars: 4096,
} as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface ExecInput {
  command: unknown;
  env?: unknown;
  cwd?: unknown;
  timeoutMs?: unknown;
  pty?: unknown;
}

/**
 * A terminal's columns and rows: at least 1 (a 0-wide window breaks every line editor), at
 * most 1000 (a 4K screen at the smallest readable font is about 600 columns; beyond that it is
 * a mistake, and the kernel keeps a window in 16 bits).
 */
export const TERMINAL_LIMITS = { min: 1, max: 1000 } as const;

/** TERM of a command on a pty unless its env or the sandbox's says otherwise (every platform) */
export const DEFAULT_TERM = "xterm-256color";

function checkWindowField(field: string, v: unknown): void {
  if (typeof v !== "number" || !Number.isInteger(v) || v < TERMINAL_LIMITS.min || v > TERMINAL_LIMITS.max)
    throw new ValidationError(
      field,
      v,
      `use a whole number of ${field.endsWith("cols") ? "columns" : "rows"} from ${TERMINAL_LIMITS.min} to ${TERMINAL_LIMITS.max}, e.g. 80 columns and 24 rows`,
    );
}

/** Throws a ValidationError naming `<prefix>.cols` or `<prefix>.rows` unless size is a terminal window. */
export function validateTerminalSize(size: unknown, prefix = "pty"): void {
  if (!size || typeof size !== "object" || Array.isArray(size))
    throw new ValidationError(prefix, size, "give the terminal's size as {cols, rows}, e.g. {cols: 80, rows: 24}");
  const s = size as { cols?: unknown; rows?: unknown };
  checkWindowField(`${prefix}.cols`, s.cols);
  checkWindowField(`${prefix}.rows`, s.rows);
}

function checkNoNul(field: string, s: string): void {
  if (s.includes("\u0000"))
    throw new ValidationError(
      field,
      s,
      "must not contain NUL bytes (\\u0000): the kernel ends a string at the first NUL; pass binary data on stdin",
    );
}

function checkArgString(field: string, s: string, what: string): number {
  checkNoNul(field, s);
  const bytes = Buffer.byteLength(s);
  if (bytes > EXEC_LIMITS.argStringBytes) {
    throw new ValidationError(
      field,
      `${bytes} bytes`,
      `${what} is longer than the kernel's per-string limit of ${EXEC_LIMITS.argStringBytes} bytes (MAX_ARG_STRLEN); pass large data on stdin or in a file`,
    );
  }
  return bytes + 1;
}

function checkCommand(command: unknown): number {
  if (!Array.isArray(command) || command.length === 0) {
    throw new ValidationError(
      "command",
      command,
      'give the command as a non-empty array of strings, e.g. ["sh", "-c", "echo hi"]',
    );
  }
  if (command.length > EXEC_LIMITS.args)
    throw new ValidationError("command", `${command.length} arguments`, `use at most ${EXEC_LIMITS.args} arguments`);
  let total = 0;
  for (const [i, a] of command.entries()) {
    if (typeof a !== "string") throw new ValidationError(`command.${i}`, a, "every argument must be a string");
    total += checkArgString(`command.${i}`, a, "the argument");
  }
  return total;
}

function checkEnv(env: unknown): number {
  if (env === undefined) return 0;
  if (!env || typeof env !== "object" || Array.isArray(env))
    throw new ValidationError("env", env, "must be an object of string values");
  const entries = Object.entries(env as Record<string, unknown>);
  if (entries.length > EXEC_LIMITS.envEntries)
    throw new ValidationError("env", `${entries.length} entries`, `at most ${EXEC_LIMITS.envEntries} entries`);
  let total = 0;
  for (const [k, v] of entries) {
    if (!ENV_NAME.test(k))
      throw new ValidationError(
        k === "" ? "env" : `env.${k}`,
        k,
        "environment variable names are letters, digits and '_', not starting with a digit (no '=', not empty)",
      );
    if (typeof v !== "string") throw new ValidationError(`env.${k}`, v, "must be a string");
    checkNoNul(`env.${k}`, v);
    total += checkArgString(`env.${k}`, `${k}=${v}`, "the variable (NAME=value)");
  }
  return total;
}

/** Throws a ValidationError naming the field for anything the kernel or a transport would refuse later. */
export function validateExecInput(req: ExecInput): void {
  const total = checkCommand(req.command) + checkEnv(req.env);
  if (total > EXEC_LIMITS.totalBytes) {
    throw new ValidationError(
      "command",
      `${total} bytes of argv and env`,
      `argv plus env may be at most ${EXEC_LIMITS.totalBytes} bytes (each string counted with its NUL); pass large data on stdin or in a file`,
    );
  }
  if (req.cwd !== undefined) {
    if (typeof req.cwd !== "string" || !req.cwd.startsWith("/") || req.cwd.length > EXEC_LIMITS.cwdChars) {
      throw new ValidationError(
        "cwd",
        req.cwd,
        `use an absolute path inside the sandbox of at most ${EXEC_LIMITS.cwdChars} characters, e.g. /workspace`,
      );
    }
    checkNoNul("cwd", req.cwd);
  }
  const t = req.timeoutMs;
  if (t !== undefined && !(typeof t === "number" && Number.isFinite(t) && t > 0))
    throw new ValidationError("timeoutMs", t, "use a positive number of milliseconds");
  if (req.pty !== undefined) validateTerminalSize(req.pty);
}
