// Snapshot layers moved by the sandbox pod itself: the pod's helper (tools/local-helper/blob.c)
// runs tar and talks to the registry directly, so a pause or resume sends only a command and
// its answer over the channel instead of every byte through the API server's exec proxy and
// the kubelet (docs/kubernetes-runtime.md, "Snapshots at registry speed").
//
//   push:    helper blob push --url <registry>/v2/<repo>/blobs/uploads/ --tar-root <base>
//              -- tar -c -f - -C <parent> [--anchored --exclude=<helper dir>] -- <base>
//            stdout: {"digest":"sha256:…","size":N,"entries":E}
//   restore: helper blob pull --url <registry>/v2/<repo>/blobs/<digest> --digest D --size N
//              -- sh -c 'mkdir -p -- "$1" && exec tar -x …' sbx-put <parent>
//
// The archive is what the replica's path makes (archive.ts getArchive, then tarFilter.ts
// DropRootEntry), so a snapshot pushed one way restores the other. A pod that cannot (no
// channel, a helper without `blob`, the registry unreachable from it) answers a fallback and
// the replica moves the layer as before. What the pod answers is untrusted: it is parsed
// strictly, and the snapshot is read back from the registry before it counts (verifySnapshot).
//
// With a token issuer (snapshots.tokenAuth, runtime/snapshot/registryToken.ts) the pod moves
// its layers in its own repository, <repository>/<sandbox id>, with a token for that alone
// handed to the helper on stdin (--auth-stdin). The replica then links the blob into the
// snapshot repository with a cross-repository mount, and before a restore links it back: a
// mount only finds a blob the sandbox's own repository holds, so a pod that names another
// sandbox's digest gets nothing. Without one, the pods use the snapshot repository itself with
// no credential: one tenant only (the backend warns).
import { Readable } from "node:stream";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import { UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { ExecResult } from "../core/types.ts";
import type { DirectLayers, DirectTransfer } from "../snapshot/layers.ts";
import { parentDir } from "../snapshot/manifest.ts";
import type { SnapshotLayer } from "../snapshot/record.ts";
import { loadTokenIssuer, sandboxRepository, sandboxToken, type TokenIssuer } from "../snapshot/registryToken.ts";
import { collect, helperExclusion } from "./archive.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import type { SandboxLookup } from "./lookup.ts";

/** the helper's exit codes (blob.c) that mean "this pod cannot", not "this layer failed" */
const CANNOT = new Map([
  [3, "the registry could not be reached or refused the request"],
  [64, "the pod's helper cannot move layers (a helper without blob, or an https registry)"],
]);
const DIGEST_MISMATCH = 4;
const STDERR_LIMIT = 16 * 1024;

export interface PodLayersOptions {
  /** the registry as the pods reach it, http://host:port: asked at each transfer when it moves */
  registry: string | (() => string);
  channels: Pick<SandboxChannels, "runHelper">;
  lookup: Pick<SandboxLookup, "runningPod">;
  logger: Logger;
  /** set: each sandbox gets a token for its own repository alone (see the header) */
  tokens?: TokenIssuer;
}

/**
 * config.snapshots.podRegistry as the backend's directLayers: with tokenAuth each sandbox gets
 * its own repository's token; without it, a warning that this is for one tenant only.
 */
export function configuredPodLayers(
  snapshots: RuntimeConfig["snapshots"],
  d: Omit<PodLayersOptions, "registry" | "tokens"> & { clock: Clock; inCluster?: () => string },
): { directLayers?: DirectLayers } {
  // an in-cluster registry: the pods go where the replicas go, a ready pod of its Service
  const registry = snapshots?.inCluster ? d.inCluster : snapshots?.podRegistry;
  if (!snapshots || !registry) return {};
  const tokens = snapshots.tokenAuth && loadTokenIssuer(snapshots.tokenAuth, d.clock);
  if (!tokens)
    d.logger.warn(
      { podRegistry: snapshots.podRegistry },
      "snapshots.podRegistry is set without snapshots.tokenAuth: sandbox pods push and pull their own snapshot layers at this address with no registry credential of their own, so a sandbox that reaches it can read or overwrite any snapshot there; use it only where every sandbox belongs to one tenant, or set tokenAuth (docs/pause-resume.md)",
    );
  const logger = d.logger.child({ component: "pod-layers" });
  const { inCluster: _, ...rest } = d;
  return { directLayers: podLayers({ ...rest, registry, logger, ...(tokens ? { tokens } : {}) }) };
}

function registryOf(o: PodLayersOptions): string {
  return typeof o.registry === "string" ? o.registry : o.registry();
}

interface Ran {
  result: ExecResult;
  stdout: string;
  stderr: string;
}

// Over 60 lines on purpose: push, restore and the per-sandbox token flags share the options in this closure.
export function podLayers(o: PodLayersOptions): DirectLayers {
  /** where this sandbox's pod moves its layers, and the helper's flags and stdin for it */
  const access = (id: string, t: DirectTransfer) => {
    if (!o.tokens) return { repo: t.repository, flags: [] as string[], token: undefined };
    const token = sandboxToken(o.tokens, t.repository, id);
    return { repo: sandboxRepository(t.repository, id), flags: ["--auth-stdin"], token };
  };
  const run = async (id: string, args: string[], t: DirectTransfer, token?: string): Promise<Ran | undefined> => {
    const { podName } = await o.lookup.runningPod(id);
    t.signal.throwIfAborted();
    const stdin = token === undefined ? undefined : Readable.from([`${token}\n`]);
    const session = await o.channels.runHelper(id, podName, args, stdin);
    if (!session) return undefined;
    const stop = () => session.kill();
    if (t.signal.aborted) stop();
    else t.signal.addEventListener("abort", stop, { once: true });
    try {
      const [result, stdout, stderr] = await Promise.all([
        session.result,
        collect(session.stdout, 4096),
        progressAndErrors(session.stderr, t.onProgress),
      ]);
      t.signal.throwIfAborted();
      return { result, stdout, stderr };
    } finally {
      t.signal.removeEventListener("abort", stop);
    }
  };
  const cannot = (id: string, op: "push" | "restore", path: string, ran: Ran): boolean => {
    const why = CANNOT.get(ran.result.exitCode);
    if (!why) return false;
    o.logger.warn(
      { sandbox: id, op, path, exitCode: ran.result.exitCode, stderr: ran.stderr.trim().slice(0, 500) },
      `the pod cannot move its snapshot layer itself (${why}); the replica moves it`,
    );
    return true;
  };

  return {
    async push(id, path, t): Promise<SnapshotLayer | undefined> {
      const parent = parentDir(path);
      const base = path.slice(path.lastIndexOf("/") + 1);
      const skip = helperExclusion(path, parent, base);
      const own = access(id, t);
      const ran = await run(
        id,
        [
          "blob",
          "push",
          ...own.flags,
          "--url",
          `${registryOf(o)}/v2/${own.repo}/blobs/uploads/`,
          "--tar-root",
          base,
          "--",
          "tar",
          "-c",
          "-f",
          "-",
          "-C",
          parent,
          ...(skip ? ["--anchored", `--exclude=${skip}`] : []),
          "--",
          base,
        ],
        t,
        own.token,
      );
      if (!ran || cannot(id, "push", path, ran)) return undefined;
      if (ran.result.exitCode !== 0)
        throw new UpstreamError(
          `pause ${id}: the pod's push of ${path} exited ${ran.result.exitCode}: ${ran.stderr.trim() || "no message"}`,
        );
      const pushed = parsePushed(id, path, ran.stdout);
      if (own.repo !== t.repository && !(await t.oci.mountBlob(t.repository, own.repo, pushed.digest)))
        throw new UpstreamError(
          `pause ${id}: the pod's push of ${path} answered ${pushed.digest}, which its repository ${own.repo} does not hold; retry the pause`,
        );
      return { path, ...pushed };
    },

    async restore(id, layer, t): Promise<boolean> {
      const own = access(id, t);
      if (own.repo !== t.repository && !(await t.oci.mountBlob(own.repo, t.repository, layer.digest))) {
        o.logger.warn(
          { sandbox: id, op: "restore", path: layer.path, digest: layer.digest },
          "the snapshot repository does not hold this layer, so the pod cannot pull it; the replica tries",
        );
        return false;
      }
      const ran = await run(
        id,
        [
          "blob",
          "pull",
          ...own.flags,
          "--url",
          `${registryOf(o)}/v2/${own.repo}/blobs/${layer.digest}`,
          "--digest",
          layer.digest,
          "--size",
          String(layer.size),
          "--",
          "sh",
          "-c",
          'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner',
          "sbx-put",
          parentDir(layer.path),
        ],
        t,
        own.token,
      );
      if (!ran || cannot(id, "restore", layer.path, ran)) return false;
      if (ran.result.exitCode === DIGEST_MISMATCH)
        throw new UpstreamError(
          `resume ${id}: ${layer.path}: ${ran.stderr.trim()}: the registry copy is corrupt or was replaced; retry or restore from another snapshot`,
        );
      if (ran.result.exitCode !== 0)
        throw new UpstreamError(
          `resume ${id}: restoring ${layer.path} in the pod exited ${ran.result.exitCode}: ${ran.stderr.trim() || "no message"}; retry the resume`,
        );
      return true;
    },
  };
}

/** The pod's answer, checked field by field: it comes from a process the tenant controls. */
export function parsePushed(id: string, path: string, stdout: string): Omit<SnapshotLayer, "path"> {
  const bad = (why: string) =>
    new UpstreamError(
      `pause ${id}: the pod's push of ${path} answered ${why}: ${JSON.stringify(stdout.slice(0, 200))}`,
    );
  let v: unknown;
  try {
    v = JSON.parse(stdout.trim());
  } catch {
    throw bad("no JSON");
  }
  const { digest, size, entries } = (v ?? {}) as Record<string, unknown>;
  if (typeof digest !== "string" || !/^sha256:[0-9a-f]{64}$/.test(digest)) throw bad("no sha256 digest");
  if (!Number.isSafeInteger(size) || (size as number) < 0) throw bad("no size");
  if (!Number.isSafeInteger(entries) || (entries as number) < 0) throw bad("no entry count");
  return { digest, size: size as number, entries: entries as number };
}

/** `sbx-progress N` lines go to onProgress; the rest (up to a limit) is the error text. */
function progressAndErrors(stream: Readable, onProgress?: (bytes: number) => void): Promise<string> {
  return new Promise((resolve) => {
    let partial = "";
    let text = "";
    const line = (l: string) => {
      const m = /^sbx-progress (\d+)$/.exec(l);
      if (m) onProgress?.(Number(m[1]));
      else if (text.length < STDERR_LIMIT) text += `${l}\n`;
    };
    stream.on("data", (c: Buffer) => {
      partial += c.toString("utf8");
      let nl = partial.indexOf("\n");
      while (nl >= 0) {
        line(partial.slice(0, nl));
        partial = partial.slice(nl + 1);
        nl = partial.indexOf("\n");
      }
      if (partial.length > STDERR_LIMIT) partial = partial.slice(-STDERR_LIMIT); // no newline ever: bounded
    });
    const done = () => {
      if (partial) line(partial);
      resolve(text.slice(0, STDERR_LIMIT));
    };
    stream.once("end", done);
    stream.once("error", done);
  });
}
