// Files in and out of a sandbox: tar over exec, streamed both ways. No volume, no sidecar;
// the sandbox image needs `tar` (every profile image has it).
import { PassThrough, type Readable } from "node:stream";
import { DOWNLOAD_CHECK_SH, downloadCheckError, withoutTrailingSlashes } from "../core/downloadCheck.ts";
import { UpstreamError, ValidationError } from "../core/errors.ts";
import type { ExecSession } from "../core/types.ts";
import { HELPER_DIR } from "./channel/paths.ts";

export type RunInSandbox = (argv: string[], stdin?: Readable) => Promise<ExecSession>;

export function validateSandboxPath(field: string, p: string): void {
  if (!p.startsWith("/") || p.split("/").includes("..")) {
    throw new ValidationError(field, p, "use an absolute path without '..', e.g. /workspace/data");
  }
}

/** Unpacks `tar` into `dir` (created if missing). Rejects with tar's own message on failure. */
export async function putArchive(run: RunInSandbox, id: string, dir: string, tar: Readable): Promise<void> {
  validateSandboxPath("dir", dir);
  const session = await run(
    ["sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner', "sbx-put", dir],
    tar,
  );
  // an input that fails midway (registry gone, digest mismatch) must not leave tar waiting for more
  const abandon = () => session.kill();
  if (tar.errored) abandon();
  else tar.once("error", abandon);
  const stderr = collect(session.stderr, 16 * 1024);
  session.stdout.resume();
  const res = await session.result;
  tar.removeListener("error", abandon);
  if (res.exitCode !== 0) {
    throw new UpstreamError(
      `put files into sandbox ${id} at ${dir}: tar exited ${res.exitCode}: ${(await stderr).trim() || "no message"}; check the archive and that ${dir} is writable (/workspace or /tmp)`,
    );
  }
}

/**
 * The tar member name of the command channel's directory (the helper, its daemon's socket) when
 * the archive of `trimmed` would hold it: it is ours, not the sandbox's files, so neither a pause
 * snapshot nor a download carries it (a resumed pod gets a fresh copy on first use).
 */
export function helperExclusion(trimmed: string, parent: string, base: string): string | undefined {
  if (trimmed !== "/" && !HELPER_DIR.startsWith(`${trimmed}/`)) return undefined;
  const rel = HELPER_DIR.slice(parent === "/" ? 1 : parent.length + 1);
  return base === "." ? `./${rel}` : rel;
}

/**
 * Streams `path` as a tar archive (entries relative to its parent directory). A missing or
 * unreadable path is reported before any byte is sent (404, 400); later tar failures error
 * the stream.
 */
// Over 60 lines on purpose: the path check, the pre-flight and the tar stream's error wiring must stay in this order.
export async function getArchive(run: RunInSandbox, id: string, path: string): Promise<Readable> {
  validateSandboxPath("path", path);
  const trimmed = path.length > 1 ? withoutTrailingSlashes(path) : path;
  const parent = trimmed.slice(0, trimmed.lastIndexOf("/")) || "/";
  const base = trimmed.slice(trimmed.lastIndexOf("/") + 1) || ".";
  const skip = helperExclusion(trimmed, parent, base);
  // one exec, check then tar: a missing or unreadable path is a 4xx (core/downloadCheck.ts)
  const session = await run([
    "sh",
    "-c",
    `p=$3\n${DOWNLOAD_CHECK_SH}\nexec tar -c -f - -C "$1" ${skip ? '--anchored --exclude="$4" ' : ""}-- "$2"`,
    "sbx-get",
    parent,
    base,
    trimmed,
    ...(skip ? [skip] : []),
  ]);
  const out = new PassThrough();
  const stderr = collect(session.stderr, 16 * 1024);
  // Hold the first byte back until we know the path exists, so "not found" is an error the
  // caller can map to 404 rather than a truncated archive.
  let piped = false;
  const startPipe = (chunk?: Buffer) => {
    if (piped) return;
    piped = true;
    if (chunk) out.write(chunk);
    session.stdout.pipe(out, { end: false });
  };
  const onFirst = (chunk: Buffer) => startPipe(chunk);
  const first = await Promise.race([
    new Promise<"data">((resolve) =>
      session.stdout.once("data", (c: Buffer) => {
        onFirst(c);
        resolve("data");
      }),
    ),
    session.result.then(() => "done" as const),
  ]);
  if (first === "done" && !piped) {
    const res = await session.result;
    const refused = downloadCheckError(res.exitCode, await stderr, path, `${id}:${path}`);
    if (refused) throw refused;
    if (res.exitCode !== 0)
      throw new UpstreamError(
        `get files from sandbox ${id} at ${path}: tar exited ${res.exitCode}: ${(await stderr).trim()}`,
      );
    session.stdout.removeAllListeners("data");
    startPipe();
  }
  // a reader that goes away before the end (a failed or stopped pause) ends tar in the sandbox
  out.once("close", () => {
    if (!out.writableFinished) session.kill();
  });
  session.result.then(
    async (res) => {
      await new Promise<void>((r) => (session.stdout.readableEnded ? r() : session.stdout.once("end", () => r())));
      if (res.exitCode === 0) out.end();
      else
        out.destroy(
          new UpstreamError(
            `get files from sandbox ${id} at ${path}: tar exited ${res.exitCode}: ${(await stderr).trim()}`,
          ),
        );
    },
    (err: Error) => out.destroy(err),
  );
  return out;
}

/** The stream's text, up to `limit` characters (the rest is read and dropped). */
export function collect(stream: Readable, limit: number): Promise<string> {
  return new Promise((resolve) => {
    let buf = "";
    stream.on("data", (c: Buffer) => {
      if (buf.length < limit) buf += c.toString("utf8");
    });
    stream.on("end", () => resolve(buf.slice(0, limit)));
    stream.on("error", () => resolve(buf));
  });
}
