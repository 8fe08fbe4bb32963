// Files in and out of a sandbox as tar streams. tar runs inside the sandbox, as the sandbox's
// uid, through the same exec path as any command: it sees only the sandbox's mounts (a symlink
// in the workspace cannot point the host at its own files), files get the sandbox's owner, and
// writes count against the sandbox's limits. The cost: the image must contain tar.
import path from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { DOWNLOAD_CHECK_SH, downloadCheckError } from "../core/downloadCheck.ts";
import { UpstreamError, ValidationError } from "../core/errors.ts";
import type { ExecRequest, ExecSession } from "../core/types.ts";

type Exec = (req: ExecRequest) => Promise<ExecSession>;

// tar's record size (default 20 blocks: 10 KiB, one read and one write syscall per 10 KiB).
// Extracting reads megabyte records (tar takes short reads from a pipe, so any archive works)
// and writes files in pieces that large: a quarter less CPU per GiB inside the sandbox.
// Creating writes 64 KiB records: fewer syscalls, while the end of the archive is padded to
// 64 KiB at most (megabyte records would make an empty directory's archive a megabyte).
// Given through TAR_OPTIONS, which GNU tar reads and busybox tar (images) ignores: a flag
// would make busybox refuse the command.
const EXTRACT_ENV = { TAR_OPTIONS: "--blocking-factor=2048" };
const CREATE_ENV = { TAR_OPTIONS: "--blocking-factor=128" };

async function collect(s: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks).toString();
}

function validatePath(field: string, p: string): void {
  if (typeof p !== "string" || !p.startsWith("/") || p.includes("\0")) {
    throw new ValidationError(field, p, "use an absolute path inside the sandbox, e.g. /workspace/src");
  }
}

export async function archiveIn(exec: Exec, dir: string, tar: Readable): Promise<void> {
  validatePath("dir", dir);
  const s = await exec({
    command: ["sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner', "sbx-put", dir],
    env: EXTRACT_ENV,
    stdin: tar,
  });
  s.stdout.resume();
  const [err, res] = await Promise.all([collect(s.stderr), s.result]);
  if (res.exitCode !== 0)
    throw new ValidationError(
      "archive",
      dir,
      `tar could not unpack it into the sandbox (exit ${res.exitCode}): ${err.trim() || "no message"}; send a valid tar stream to a writable directory (/workspace or /tmp)`,
    );
}

export async function archiveOut(exec: Exec, p: string): Promise<Readable> {
  validatePath("path", p);
  // missing or unreadable: a 4xx now, not an archive that breaks off later (core/downloadCheck.ts)
  const check = await exec({ command: ["sh", "-c", `p=$1\n${DOWNLOAD_CHECK_SH}`, "sbx-check", p] });
  check.stdout.resume();
  const [checkErr, checked] = await Promise.all([collect(check.stderr), check.result]);
  if (checked.exitCode !== 0)
    throw (
      downloadCheckError(checked.exitCode, checkErr, p) ??
      new UpstreamError(`checking ${p} in the sandbox failed (exit ${checked.exitCode}): ${checkErr.trim()}`)
    );
  const norm = path.posix.normalize(p);
  const parent = path.posix.dirname(norm);
  const base = norm === "/" ? "." : path.posix.basename(norm);
  const s = await exec({ command: ["tar", "-c", "-f", "-", "-C", parent, "--", base], env: CREATE_ENV });
  const out = new PassThrough();
  s.stdout.pipe(out, { end: false });
  const errText = collect(s.stderr);
  // a reader that gave up (a client gone, a failed upload) would leave tar blocked on a full
  // pipe for good: kill it and discard what it had written
  out.once("close", () => {
    if (out.writableFinished) return;
    s.kill();
    s.stdout.unpipe(out);
    s.stdout.resume();
  });
  s.stdout.on("end", async () => {
    const res = await s.result.catch((e: Error) => e);
    if (res instanceof Error) return out.destroy(res);
    if (res.exitCode !== 0)
      return out.destroy(
        new UpstreamError(`tar of ${p} in the sandbox failed (exit ${res.exitCode}): ${(await errText).trim()}`),
      );
    out.end();
  });
  return out;
}
