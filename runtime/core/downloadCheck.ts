// The check a download runs inside the sandbox before tar starts, the same on every backend: a
// missing path is a 404 and an unreadable one (or the first unreadable file or directory under
// it) a 400 naming it, instead of a 200 whose archive breaks off or silently leaves files out.
// It runs as the sandbox's user, so it sees what tar will see. Cost: one metadata walk of a
// directory (GNU find; where find lacks -readable, e.g. busybox, only the top is checked).
// What it cannot catch (a file changed after the check, tar killed) fails the stream itself,
// which the service turns into an aborted response (runtime/server/files.ts).
import { SbxError, ValidationError } from "./errors.ts";

export const PATH_MISSING_EXIT = 44;
export const PATH_UNREADABLE_EXIT = 45;
export const PATH_NOT_FILE_EXIT = 46;

/**
 * POSIX sh reading the path from $p: exits PATH_MISSING_EXIT or PATH_UNREADABLE_EXIT (the
 * offending path on stderr), else falls through, so a caller can append `exec tar ...`.
 * A symlink is archived as a link (tar without -h), so only its own existence matters. The path
 * itself must be a file or a directory: a device, FIFO or socket would become a node in the
 * archive that no unprivileged extract recreates (under a directory, tar's own handling stays).
 * find's -readable asks the kernel (access(2)); the shell's `[ -r ]` is only the fallback
 * where find lacks it, because dash answers "readable" to uid 0 even without capabilities
 * (the Kubernetes sandboxes run so), where the kernel refuses the read.
 */
export const DOWNLOAD_CHECK_SH = [
  `if [ ! -e "$p" ] && [ ! -L "$p" ]; then exit ${PATH_MISSING_EXIT}; fi`,
  `if [ ! -L "$p" ] && [ ! -d "$p" ] && [ ! -f "$p" ]; then exit ${PATH_NOT_FILE_EXIT}; fi`,
  "sbx_bad=",
  'if [ ! -L "$p" ]; then',
  '  if sbx_bad=$(find "$p" \\( \\( -type f ! -readable \\) -o \\( -type d \\( ! -readable -o ! -executable \\) \\) \\) -print -quit 2>/dev/null) || [ -n "$sbx_bad" ]; then :',
  '  elif [ -d "$p" ]; then { [ -r "$p" ] && [ -x "$p" ]; } || sbx_bad=$p',
  '  elif [ ! -r "$p" ]; then sbx_bad=$p; fi',
  "fi",
  `if [ -n "$sbx_bad" ]; then printf '%s' "$sbx_bad" >&2; exit ${PATH_UNREADABLE_EXIT}; fi`,
].join("\n");

/** The 4xx for a failed check (where = how the caller names the path, e.g. "sbx-1:/etc/shadow"), or undefined. */
export function downloadCheckError(exitCode: number, stderr: string, path: string, where = path): SbxError | undefined {
  if (exitCode === PATH_MISSING_EXIT) {
    return new SbxError(
      "not_found",
      `path ${JSON.stringify(where)} not found: no such file or directory in the sandbox (or a parent directory the sandbox's user cannot enter); check it with: sbx run <id> -- ls -la ${parentOf(path)}`,
      { field: "path", value: path },
    );
  }
  if (exitCode === PATH_NOT_FILE_EXIT)
    return new ValidationError(
      "path",
      path,
      "is a device, FIFO or socket, not a file or directory: download a regular file or a directory",
    );
  if (exitCode === PATH_UNREADABLE_EXIT) {
    const bad = stderr.trim() || path;
    const what = bad === path ? "it is" : `${JSON.stringify(bad)} under it is`;
    return new ValidationError(
      "path",
      path,
      `${what} not readable by the sandbox's user (permission denied), so the archive would be incomplete; make it readable (chmod) or download another path`,
    );
  }
  return undefined;
}

function parentOf(p: string): string {
  const i = withoutTrailingSlashes(p).lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

/**
 * `p` without its trailing slashes, in one pass. Not `p.replace(/\/+$/, "")`: that pattern is
 * retried at every slash of a run, quadratic in it, and a 4 KiB tenant path of slashes held the
 * event loop 20-60 ms per request.
 */
export function withoutTrailingSlashes(p: string): string {
  let end = p.length;
  while (end > 0 && p.charCodeAt(end - 1) === 0x2f) end--;
  return p.slice(0, end);
}
