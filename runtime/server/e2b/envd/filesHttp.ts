// envd's plain-HTTP file routes. GET /files?path= streams a file's bytes out; POST /files writes
// files: multipart/form-data with one `file` part per file whose filename is the FULL
// destination path (the array form of files.write), or a raw body with ?path=. Missing parent
// directories are created. Content goes in as the stdin of `cat > "$2"` and out as the stdout
// of `cat -- "$1"`; it never passes through a shell string, and neither does the path.
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import type { FastifyReply, FastifyRequest } from "fastify";
import { NotFoundError, type SbxError, TooLargeError, ValidationError } from "../../../core/errors.ts";
import type { ExecSession } from "../../../core/types.ts";
import { ByteLimit } from "../../files.ts";
import type { EnvdCaller } from "../access.ts";
import { resolveSandboxPath, validateUser } from "./caller.ts";
import type { EnvdServices } from "./context.ts";
import { boundaryOf, type FormPart, MultipartReader } from "./multipart.ts";
import { EXIT, runScript, startScript } from "./sandboxCommand.ts";

const READ = `
if [ ! -e "$1" ]; then exit ${EXIT.missing}; fi
if [ -d "$1" ]; then exit ${EXIT.isDirectory}; fi
if [ ! -f "$1" ]; then exit ${EXIT.notFile}; fi
if [ ! -r "$1" ]; then exit ${EXIT.unreadable}; fi
exec cat -- "$1"
`;
const WRITE = `mkdir -p -- "$1" && exec cat > "$2"`;

export interface FilesQuery {
  path?: string;
  username?: string;
}

/** What the SDK reads back for each written file. */
interface WriteInfo {
  name: string;
  type: "file";
  path: string;
}

function readFailure(path: string, exitCode: number, stderr: string): SbxError {
  if (exitCode === EXIT.missing) return new NotFoundError("file", path);
  if (exitCode === EXIT.isDirectory)
    return new ValidationError("path", path, "is a directory: read a file (list a directory with files.list)");
  if (exitCode === EXIT.notFile)
    return new ValidationError(
      "path",
      path,
      "is a device, FIFO or socket, not a file: its bytes never end (or never come); read a regular file",
    );
  if (exitCode === EXIT.unreadable) return new ValidationError("path", path, "is not readable by the sandbox user");
  return new ValidationError("path", path, `read failed in the sandbox: ${stderr.trim().slice(0, 500) || exitCode}`);
}

/**
 * Whichever comes first: a byte of output (the checks passed) or the command's end (a refusal,
 * or an empty file). Only bytes count: a Readable emits 'readable' at its end too, and stdout
 * can end before the exit code arrives (the Kubernetes channel does), so an empty 'readable'
 * waits for the result instead of passing a refusal off as data.
 */
export function firstOutcome(session: ExecSession): Promise<"data" | "end"> {
  return new Promise((resolve) => {
    const onReadable = () => {
      if (session.stdout.readableLength > 0) resolve("data");
      else if (!session.stdout.readableEnded) session.stdout.once("readable", onReadable);
    };
    session.stdout.once("readable", onReadable);
    session.result.then(
      () => resolve("end"),
      () => resolve("end"),
    );
  });
}

/**
 * GET /files: the refusals (missing 404, directory or unreadable 400) come before the first
 * byte; a read that fails later cuts the response (no terminating chunk), never a short file
 * passed off as complete.
 */
export async function downloadFile(s: EnvdServices, caller: EnvdCaller, q: FilesQuery, reply: FastifyReply) {
  validateUser("username", q.username);
  const path = resolveSandboxPath("path", q.path);
  const session = await startScript(s.manager, caller, READ, [path]);
  const stderr: Buffer[] = [];
  session.stderr.on("data", (c: Buffer) => stderr.push(c));
  if ((await firstOutcome(session)) === "end") {
    const r = await session.result;
    if (r.exitCode !== 0) {
      session.stdout.resume();
      throw readFailure(path, r.exitCode, Buffer.concat(stderr).toString("utf8"));
    }
  }
  session.result.then(
    (r) => {
      if (r.exitCode !== 0) session.stdout.destroy(new Error(`cat of ${path} ended with exit code ${r.exitCode}`));
    },
    (err) => session.stdout.destroy(err),
  );
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) session.kill();
  });
  return reply
    .type("application/octet-stream")
    .header("content-disposition", `attachment; filename*=UTF-8''${encodeURIComponent(posix.basename(path))}`)
    .send(session.stdout);
}

async function writeOne(s: EnvdServices, caller: EnvdCaller, path: string, body: Readable): Promise<WriteInfo> {
  const out = await runScript(s.manager, caller, WRITE, [posix.dirname(path), path], body);
  if (out.exitCode !== 0) {
    if (body.errored) throw body.errored;
    throw new ValidationError("path", path, `write failed in the sandbox: ${out.stderr.trim().slice(0, 500)}`);
  }
  if (body.errored) throw body.errored;
  return { name: posix.basename(path), type: "file", path };
}

/** The request body, gunzipped when the SDK sent Content-Encoding: gzip, and limited. */
function uploadBody(req: FastifyRequest, limitBytes: number): Readable {
  const limiter = new ByteLimit(limitBytes);
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > limitBytes) throw new TooLargeError("body", limitBytes);
  let src: Readable = req.raw;
  if (/^gzip$/i.test(String(req.headers["content-encoding"] ?? ""))) {
    const gunzip = createGunzip();
    req.raw.on("error", (err) => gunzip.destroy(err));
    req.raw.pipe(gunzip);
    src = gunzip;
  }
  src.on("error", (err: NodeJS.ErrnoException) =>
    // zlib's errors (Z_DATA_ERROR, Z_BUF_ERROR...) are the client's bytes, not ours: a 400
    limiter.destroy(
      src !== req.raw && err.code?.startsWith("Z_")
        ? new ValidationError(
            "content-encoding",
            "gzip",
            `the body is not valid gzip (${err.message}): send gzip bytes or drop the header`,
          )
        : err,
    ),
  );
  // its failure is read from body.errored (writeOne) or by the multipart reader, not from here
  limiter.on("error", () => undefined);
  return src.pipe(limiter);
}

// Over 60 lines on purpose: the multipart parts, the per-file command and the error replies share one request's
// state.
export async function uploadFiles(
  s: EnvdServices,
  caller: EnvdCaller,
  q: FilesQuery,
  req: FastifyRequest,
  limitBytes: number,
): Promise<WriteInfo[]> {
  validateUser("username", q.username);
  const type = String(req.headers["content-type"] ?? "");
  if (!/^multipart\/form-data/i.test(type)) {
    // a raw body: one file, named by ?path=
    const path = resolveSandboxPath("path", q.path);
    return [await writeOne(s, caller, path, uploadBody(req, limitBytes))];
  }
  const boundary = boundaryOf(type);
  const parts: FormPart[] = [];
  let wake: (() => void) | undefined;
  const reader = new MultipartReader(boundary, (p) => {
    parts.push(p);
    wake?.();
  });
  const body = uploadBody(req, limitBytes);
  body.on("error", (err) => reader.destroy(err));
  body.pipe(reader);
  const finished = new Promise<void>((resolve, reject) => {
    reader.on("finish", resolve);
    reader.on("error", reject);
  });
  finished.catch(() => undefined); // observed below; a failure meanwhile must not go unhandled
  const written: WriteInfo[] = [];
  try {
    await writeParts();
  } catch (err) {
    // stop reading: the error handler drains what the client still sends
    body.unpipe(reader);
    reader.destroy();
    for (const p of parts) p.body.destroy();
    throw err;
  }
  if (written.length === 0)
    throw new ValidationError(
      "body",
      "(multipart)",
      'send at least one part named "file" with the destination as filename',
    );
  return written;

  async function writeParts(): Promise<void> {
    for (;;) {
      const part = parts.shift();
      if (!part) {
        const more = await Promise.race([
          finished.then(() => false),
          new Promise<boolean>((resolve) => (wake = () => resolve(true))),
        ]);
        wake = undefined;
        if (!more && parts.length === 0) break;
        continue;
      }
      if (part.name !== "file") {
        part.body.resume(); // other form fields are not files
        continue;
      }
      // the part's filename is the destination: the full path, never its basename (?path= only
      // when a part has no filename)
      const path = resolveSandboxPath("file part filename", part.filename || q.path);
      try {
        written.push(await writeOne(s, caller, path, part.body));
      } catch (err) {
        part.body.destroy();
        throw err;
      }
    }
    await finished;
  }
}
