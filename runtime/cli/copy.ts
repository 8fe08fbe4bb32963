// `sbx cp` in both directions, with a local tar on our side. A copy succeeds only when both
// ends say so: the transfer arrived whole (the service cuts a failed download short, see
// runtime/server/files.ts) and the local tar exited 0. Anything else is an error naming what
// failed, so a user never believes a copy that did not happen.
import { spawn } from "node:child_process";
import { accessSync, constants, mkdirSync, statSync } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { PassThrough, pipeline, type Readable, type Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { UpstreamError, ValidationError } from "../core/errors.ts";
import { HeldTail } from "../core/heldTail.ts";
import type { Manager } from "../core/types.ts";

interface LocalTar {
  stdin: Writable;
  stdout: Readable;
  /** resolves on exit 0; rejects naming the command, its exit and its stderr */
  exited: Promise<void>;
  kill(): void;
}

function localTar(args: string[]): LocalTar {
  const p = spawn("tar", args, { stdio: ["pipe", "pipe", "pipe"] });
  let err = "";
  p.stderr.on("data", (c) => (err = (err + c).slice(-4000)));
  const exited = new Promise<void>((res, rej) => {
    p.on("error", (e) => rej(new Error(`tar could not start: ${e.message}; install tar`)));
    p.on("close", (code, signal) => {
      if (code === 0) return res();
      rej(
        new Error(
          `local tar ${args.join(" ")} failed (${code === null ? `killed by ${signal}` : `exit ${code}`}): ${err.trim() || "no message"}`,
        ),
      );
    });
  });
  exited.catch(() => undefined); // awaited by the caller; never an unhandled rejection meanwhile
  const kill = () => {
    p.kill("SIGKILL");
    // "close" waits for EOF on every pipe: a stdout nobody reads any more (the upload failed,
    // so it is paused by back-pressure) never reaches it, and the exit would never settle
    p.stdin.destroy();
    p.stdout.destroy();
  };
  return { stdin: p.stdin, stdout: p.stdout, exited, kill };
}

/** Local file or directory -> ID:/dir. Returns the resolved local path. */
export async function copyIn(manager: Manager, owner: string, src: string, id: string, dir: string): Promise<string> {
  const local = resolve(src);
  statSync(local); // a missing source is an ENOENT naming the path
  try {
    accessSync(local, constants.R_OK);
  } catch {
    throw new ValidationError(
      "cp",
      src,
      "the local source is not readable by you (permission denied); fix its mode or copy another path",
    );
  }
  const tar = localTar(["-C", dirname(local), "-cf", "-", basename(local)]);
  // tar writes a well-formed archive even when it fails on a file: hold its end back until it
  // exits 0, and abort the upload otherwise, so the sandbox never unpacks it as complete
  const whole = new PassThrough();
  tar.stdout.pipe(whole, { end: false });
  Promise.all([finished(tar.stdout), tar.exited]).then(
    () => whole.end(),
    (err: Error) => whole.destroy(err),
  );
  const upload = new HeldTail();
  pipeline(whole, upload, () => undefined);
  let tarEnded = false;
  let tarKilled = false;
  tar.exited.then(
    () => (tarEnded = true),
    () => (tarEnded = true),
  );
  const put = manager.putArchive(owner, id, dir, upload).catch((err: unknown) => {
    if (!tarEnded) {
      tarKilled = true;
      tar.kill(); // the upload failed first (e.g. a 4xx): nobody reads tar's output any more
    }
    throw err;
  });
  const [sent, packed] = await Promise.allSettled([put, tar.exited]);
  if (packed.status === "rejected" && !tarKilled) {
    throw new Error(
      `copy of ${local} to ${id}:${dir} failed: ${(packed.reason as Error).message}; the upload was aborted (${dir} may hold part of it)`,
    );
  }
  if (sent.status === "rejected") throw sent.reason;
  return local;
}

/** ID:/path -> local directory (created). Returns the resolved directory. */
export async function copyOut(manager: Manager, owner: string, id: string, path: string, dst: string): Promise<string> {
  const dir = resolve(dst);
  mkdirSync(dir, { recursive: true });
  const archive = await manager.getArchive(owner, id, path);
  const tar = localTar(["-C", dir, "-xf", "-"]);
  let tarKilled = false;
  const stopTar = () => {
    tarKilled = true;
    tar.kill(); // pipe() does not end tar's stdin on an error: it would wait for more for good
  };
  archive.on("error", stopTar);
  // tar stops reading at the end-of-archive marker and may exit with the padding after it
  // unread: the EPIPE says nothing about the copy. The rest is drained, because only the end
  // of the stream says the service finished the archive without an error.
  tar.stdin.on("error", (e: NodeJS.ErrnoException) => {
    archive.unpipe(tar.stdin);
    archive.resume();
    if (e.code !== "EPIPE") stopTar();
  });
  archive.pipe(tar.stdin);
  // a tar that failed on its own (an unwritable target) stops the download
  tar.exited.catch(() => tarKilled || archive.destroy());
  const [received, unpacked] = await Promise.allSettled([finished(archive), tar.exited]);
  if (unpacked.status === "rejected" && !tarKilled) {
    throw new Error(`copy of ${id}:${path} to ${dir} failed: ${(unpacked.reason as Error).message}`);
  }
  if (received.status === "rejected") {
    const err = received.reason as Error;
    throw err instanceof UpstreamError
      ? new UpstreamError(`${err.message}; ${dir} may hold part of the files`, err.details)
      : err;
  }
  if (unpacked.status === "rejected") throw unpacked.reason;
  return dir;
}
