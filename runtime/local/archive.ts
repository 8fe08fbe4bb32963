// Files in and out of a sandbox as tar streams. tar runs inside the sandbox, as the sandbox's
// uid, through the same exec path as any command: it sees only the sandbox's mounts (a symlink
// in the workspace cannot point the host at its own files), files get the sandbox's owner, and
// writes count against the sandbox's limits. The cost: the image must contain tar.
import path from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { NotFoundError, ValidationError } from "../core/errors.ts";
import type { ExecRequest, ExecSession } from "../core/types.ts";

type Exec = (req: ExecRequest) => Promise<ExecSession>;

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
  const s = await exec({ command: ["sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner', "sbx-put", dir], stdin: tar });
  s.stdout.resume();
  const [err, res] = await Promise.all([collect(s.stderr), s.result]);
  if (res.exitCode !== 0) throw new ValidationError("archive", dir, `tar could not unpack it into the sandbox (exit ${res.exitCode}): ${err.trim() || "no message"}; send a valid tar stream to a writable directory (/workspace or /tmp)`);
}

export async function archiveOut(exec: Exec, p: string): Promise<Readable> {
  validatePath("path", p);
  const check = await exec({ command: ["test", "-e", p] });
  check.stdout.resume();
  check.stderr.resume();
  if ((await check.result).exitCode !== 0) throw new NotFoundError("path", p);
  const norm = path.posix.normalize(p);
  const parent = path.posix.dirname(norm);
  const base = norm === "/" ? "." : path.posix.basename(norm);
  const s = await exec({ command: ["tar", "-c", "-f", "-", "-C", parent, "--", base] });
  const out = new PassThrough();
  s.stdout.pipe(out, { end: false });
  const errText = collect(s.stderr);
  s.stdout.on("end", async () => {
    const res = await s.result.catch((e: Error) => e);
    if (res instanceof Error) return out.destroy(res);
    if (res.exitCode !== 0) return out.destroy(new Error(`tar of ${p} in the sandbox failed (exit ${res.exitCode}): ${(await errText).trim()}`));
    out.end();
  });
  return out;
}
