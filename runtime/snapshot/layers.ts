// Moving one writable path between a sandbox and the registry, and checking what was pushed.
// Out: the path's archive (backend.getArchive) streams through DropRootEntry straight into a
// blob upload. In: the blob streams, digest-verified, into backend.putArchive. Either way a
// signal stops the transfer (a delete of the sandbox), and nothing holds a whole archive.
import { basename } from "node:path";
import type { Readable } from "node:stream";
import { UpstreamError } from "../core/errors.ts";
import type { Backend, LayerPathStats } from "../core/types.ts";
import { parentDir, readSnapshotLayers } from "./manifest.ts";
import type { OciClient } from "./oci.ts";
import type { SnapshotInfo, SnapshotLayer } from "./record.ts";
import { DropRootEntry } from "./tarFilter.ts";

export interface LayerIo {
  backend: Pick<Backend, "getArchive" | "putArchive">;
  oci: OciClient;
  repository: string;
  /** the sandbox moves its own layers (runtime/k8s/podLayers.ts); tried first, else the path above */
  direct?: DirectLayers;
  /** counts each layer moved, by the path that moved it */
  counts?: LayerPathStats;
}

export interface DirectTransfer {
  repository: string;
  /** the replica's own registry client, for what the sandbox's scoped credential may not do */
  oci: Pick<OciClient, "mountBlob">;
  signal: AbortSignal;
  onProgress?: (bytes: number) => void;
}

/**
 * A backend whose sandboxes reach the registry push and pull their layers themselves, so the
 * bytes never cross this process. Same archive semantics as pushLayer/restoreLayer (the root
 * entry dropped, entries counted, the digest verified). Undefined or false: this sandbox cannot
 * (no helper, registry unreachable from it) and the caller moves the layer itself.
 */
export interface DirectLayers {
  push(id: string, path: string, o: DirectTransfer): Promise<SnapshotLayer | undefined>;
  restore(id: string, layer: SnapshotLayer, o: DirectTransfer): Promise<boolean>;
}

/**
 * Runs `each` over the layers concurrently. The first failure stops the others (their signal
 * aborts with it), and the call settles only when every one has: nothing of a failed pause or
 * resume still moves bytes when its caller unwinds (releases the compute, deletes the sandbox).
 * Rejects with the first failure, or the signal's reason when the caller stopped it.
 */
export async function allLayers<T, R>(
  items: T[],
  signal: AbortSignal,
  each: (item: T, signal: AbortSignal) => Promise<R>,
): Promise<R[]> {
  const failure = new AbortController();
  const both = AbortSignal.any([signal, failure.signal]);
  const settled = await Promise.allSettled(
    items.map((item) =>
      each(item, both).catch((err: unknown) => {
        failure.abort(err);
        throw err;
      }),
    ),
  );
  if (both.aborted) throw both.reason;
  return settled.map((r) => (r as PromiseFulfilledResult<R>).value);
}

/** Closes a stream nothing reads yet (without an error event no one would hear); the abort's reason. */
function closed(stream: Readable, signal: AbortSignal): unknown {
  stream.destroy();
  return signal.reason;
}

/** Streams `path` of sandbox `id` into a blob. Resolves with the layer once the registry has it. */
export async function pushLayer(
  io: LayerIo,
  id: string,
  path: string,
  signal: AbortSignal,
  onProgress?: (bytes: number) => void,
): Promise<SnapshotLayer> {
  signal.throwIfAborted();
  const direct = await io.direct?.push(id, path, { repository: io.repository, oci: io.oci, signal, onProgress });
  if (direct) {
    if (io.counts) io.counts.podPush++;
    return direct;
  }
  signal.throwIfAborted();
  const raw = await io.backend.getArchive(id, path);
  // the abort may have landed while the archive was opened: a listener added now would never fire
  if (signal.aborted) throw closed(raw, signal);
  const filter = new DropRootEntry(basename(path));
  const tar = raw.pipe(filter);
  raw.once("error", (e) => tar.destroy(e));
  // An abort can destroy the archive after the upload stopped reading it (it finished, or failed
  // first): its error then reaches a filter nobody listens to any more, an uncaught exception.
  // The failure itself is the upload's rejection or the signal's reason.
  tar.on("error", () => undefined);
  const stop = () => raw.destroy(signal.reason as Error);
  signal.addEventListener("abort", stop, { once: true });
  try {
    const blob = await io.oci.pushBlob(io.repository, tar, { onProgress });
    signal.throwIfAborted();
    if (io.counts) io.counts.replicaPush++;
    return { path, ...blob, entries: filter.entries };
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

/** Streams the layer's blob back into sandbox `id`; rejects on any failure, digest mismatch included. */
export async function restoreLayer(
  io: LayerIo,
  id: string,
  snap: SnapshotInfo,
  layer: SnapshotLayer,
  signal: AbortSignal,
  onProgress?: (bytes: number) => void,
): Promise<void> {
  signal.throwIfAborted();
  if (await io.direct?.restore(id, layer, { repository: snap.repository, oci: io.oci, signal, onProgress })) {
    if (io.counts) io.counts.podRestore++;
    return;
  }
  signal.throwIfAborted();
  const stream = await io.oci.pullBlob(snap.repository, layer.digest, { size: layer.size, onProgress });
  // as above: never unpack into a sandbox whose delete stopped this resume while the blob opened
  if (signal.aborted) throw closed(stream, signal);
  const stop = () => stream.destroy(signal.reason as Error);
  signal.addEventListener("abort", stop, { once: true });
  stream.on("error", () => undefined); // as in pushLayer: unpack reports the failure
  try {
    await unpack(io, id, layer, stream);
    if (io.counts) io.counts.replicaRestore++;
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

async function unpack(io: LayerIo, id: string, layer: SnapshotLayer, stream: Readable): Promise<void> {
  // A backend may finish unpacking before noticing the stream failed at its end (digest check).
  let streamError: unknown;
  // The stream can fail (digest mismatch, registry gone, a delete stopping the resume) before
  // the backend has attached to it, and a backend that never sees the error would wait for
  // an end that never comes: the failure decides, and the caller then releases the compute
  // (which ends the half-done unpack).
  const failed = new Promise<never>((_, reject) =>
    stream.once("error", (e) => {
      streamError = e;
      reject(e);
    }),
  );
  failed.catch(() => undefined);
  const unpacking = io.backend.putArchive(id, parentDir(layer.path), stream);
  unpacking.catch(() => undefined);
  await Promise.race([unpacking, failed]);
  // tar stops reading at the end-of-archive marker and may exit leaving the record padding
  // unread; read the rest so the digest check (at the stream's end) covers every byte
  if (!stream.readableEnded && !streamError) {
    if (stream.destroyed)
      throw new UpstreamError(
        `resume ${id}: the restore of ${layer.path} closed the snapshot stream before its end; retry the resume`,
      );
    await new Promise<void>((resolve) => {
      stream.once("end", resolve);
      stream.once("error", () => resolve());
      stream.once("close", () => resolve());
      stream.resume();
    });
  }
  if (streamError) throw streamError;
}

/** undefined when the registry holds exactly this manifest and every layer; else what is wrong. */
export async function verifySnapshot(oci: OciClient, info: SnapshotInfo): Promise<string | undefined> {
  const head = await oci.headManifest(info.repository, info.tag);
  if (!head) return `tag ${info.tag} is missing`;
  if (head.digest !== info.digest) return `tag ${info.tag} points at ${head.digest}, expected ${info.digest}`;
  const { manifest } = await oci.getManifest(info.repository, info.digest);
  const layers = readSnapshotLayers(manifest);
  if (typeof layers === "string") return layers;
  const key = (ls: SnapshotLayer[]) => JSON.stringify(ls.map((l) => [l.path, l.digest, l.size]));
  if (key(layers) !== key(info.layers)) return "manifest layers differ from the pushed layers";
  const present = await Promise.all(layers.map((l) => oci.blobExists(info.repository, l.digest)));
  const missing = layers.find((_, i) => !present[i]);
  return missing ? `layer ${missing.digest} (${missing.path}) is missing` : undefined;
}
