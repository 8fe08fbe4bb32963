// filesystem.Filesystem through small commands in the sandbox (sandboxCommand.ts): GNU find
// describes entries, mkdir/mv/rm change them, a polling loop watches a directory (watch.ts). Every image profile we ship has GNU findutils
// and coreutils (the host's tools locally, Debian-based images on Kubernetes).
import { posix } from "node:path";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { NotFoundError, ValidationError } from "../../../core/errors.ts";
import type { EnvdCaller } from "../access.ts";
import { resolveSandboxPath, userFromAuthorization, validateUser } from "./caller.ts";
import { callerOf, type EnvdServices } from "./context.ts";
import { type Entry, FIND_FORMAT, parseFindEntries } from "./entries.ts";
import type { Filesystem } from "./gen/filesystem/filesystem_pb.ts";
import { guarded, toConnectError } from "./rpcErrors.ts";
import { type CommandOutput, EXIT, runScript } from "./sandboxCommand.ts";
import { PolledWatchers, watchDir } from "./watchService.ts";

/** List $1 to depth $2 ($2 = 0: the entry itself). */
const LIST = `
p=$1
if [ ! -e "$p" ] && [ ! -L "$p" ]; then exit ${EXIT.missing}; fi
if [ "$2" -gt 0 ] && [ ! -d "$p" ]; then exit ${EXIT.notDirectory}; fi
if [ "$2" -eq 0 ]; then exec find "$p" -maxdepth 0 -printf '${FIND_FORMAT}'; fi
exec find "$p" -mindepth 1 -maxdepth "$2" -printf '${FIND_FORMAT}'
`;
const MAKE_DIR = `
if [ -e "$1" ] || [ -L "$1" ]; then exit ${EXIT.exists}; fi
mkdir -p -- "$1" && exec find "$1" -maxdepth 0 -printf '${FIND_FORMAT}'
`;
const MOVE = `
if [ ! -e "$1" ] && [ ! -L "$1" ]; then exit ${EXIT.missing}; fi
mkdir -p -- "$3" && mv -T -- "$1" "$2" && exec find "$2" -maxdepth 0 -printf '${FIND_FORMAT}'
`;
const REMOVE = `exec rm -rf -- "$1"`;

/** The largest depth a listing may ask for: deep enough for any tree, small enough for find. */
const MAX_DEPTH = 1000;

function failure(path: string, out: CommandOutput, what: string): Error {
  if (out.exitCode === EXIT.missing) return new NotFoundError("path", path);
  if (out.exitCode === EXIT.notDirectory)
    return new ValidationError("path", path, "is not a directory: list a directory, or Stat a file");
  if (out.exitCode === EXIT.exists)
    return new ConnectError(`path ${JSON.stringify(path)} already exists`, Code.AlreadyExists);
  const detail = out.stderr.trim().slice(0, 500) || `exit code ${out.exitCode}`;
  // permission problems and the like are about the caller's path, not our failure
  return new ValidationError("path", path, `${what} failed in the sandbox: ${detail}`);
}

async function describe(s: EnvdServices, caller: EnvdCaller, path: string, depth: number): Promise<Entry[]> {
  const out = await runScript(s.manager, caller, LIST, [path, String(depth)]);
  if (out.exitCode !== 0) throw failure(path, out, depth === 0 ? "stat" : "list");
  return parseFindEntries(out.stdout);
}

function single(entries: Entry[], path: string): Entry {
  const e = entries[0];
  if (!e) throw new NotFoundError("path", path);
  return e;
}

function callerFor(ctx: HandlerContext): EnvdCaller {
  validateUser("authorization", userFromAuthorization(ctx.requestHeader.get("authorization")));
  return callerOf(ctx);
}

// Over 60 lines on purpose: the Connect service as one object of its RPC handlers, each a few lines.
export function filesystemService(s: EnvdServices): Partial<ServiceImpl<typeof Filesystem>> {
  const log = s.logger.child({ op: "envd.filesystem" });
  const polled = new PolledWatchers();
  return {
    stat: (req, ctx) =>
      guarded(log, async () => {
        const path = resolveSandboxPath("path", req.path);
        return { entry: single(await describe(s, callerFor(ctx), path, 0), path) };
      }),

    listDir: (req, ctx) =>
      guarded(log, async () => {
        const path = resolveSandboxPath("path", req.path);
        if (req.depth < 1 || req.depth > MAX_DEPTH)
          throw new ValidationError(
            "depth",
            req.depth,
            `list with a depth from 1 (the directory's entries) to ${MAX_DEPTH}`,
          );
        return { entries: await describe(s, callerFor(ctx), path, req.depth) };
      }),

    makeDir: (req, ctx) =>
      guarded(log, async () => {
        const path = resolveSandboxPath("path", req.path);
        const out = await runScript(s.manager, callerFor(ctx), MAKE_DIR, [path]);
        if (out.exitCode !== 0) throw failure(path, out, "make dir");
        return { entry: single(parseFindEntries(out.stdout), path) };
      }),

    move: (req, ctx) =>
      guarded(log, async () => {
        const source = resolveSandboxPath("source", req.source);
        const destination = resolveSandboxPath("destination", req.destination);
        const out = await runScript(s.manager, callerFor(ctx), MOVE, [source, destination, posix.dirname(destination)]);
        if (out.exitCode !== 0) throw failure(source, out, "move");
        return { entry: single(parseFindEntries(out.stdout), destination) };
      }),

    async *watchDir(req, ctx) {
      let caller: EnvdCaller;
      let path: string;
      try {
        caller = callerFor(ctx);
        path = resolveSandboxPath("path", req.path);
      } catch (err) {
        throw toConnectError(err, log);
      }
      try {
        yield* watchDir(s, caller, path, req.recursive, ctx);
      } catch (err) {
        throw toConnectError(err, log);
      }
    },

    createWatcher: (req, ctx) =>
      guarded(log, async () => {
        const path = resolveSandboxPath("path", req.path);
        return { watcherId: await polled.create(s, callerFor(ctx), path, req.recursive, ctx) };
      }),

    getWatcherEvents: (req, ctx) =>
      guarded(log, async () => ({
        events: polled.take(callerFor(ctx), req.watcherId).map((e) => ({ name: e.name, type: e.type })),
      })),

    removeWatcher: (req, ctx) =>
      guarded(log, async () => {
        polled.remove(callerFor(ctx), req.watcherId);
        return {};
      }),

    remove: (req, ctx) =>
      guarded(log, async () => {
        const path = resolveSandboxPath("path", req.path);
        const out = await runScript(s.manager, callerFor(ctx), REMOVE, [path]);
        if (out.exitCode !== 0) throw failure(path, out, "remove");
        return {};
      }),
  };
}
