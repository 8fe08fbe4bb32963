// A sandbox's snapshots as the registry holds them: pushing one (a layer per writable path, the
// config blob, the manifest under its tag, then a read-back verification), reading one back
// from a tag a crash left behind, and deleting them. No records and no compute: the Snapshotter
// decides when each of these runs and records the outcome.
import type { Clock } from "../core/clock.ts";
import { UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { TransferProgress } from "../core/types.ts";
import { allLayers, type LayerIo, pushLayer, verifySnapshot } from "./layers.ts";
import { buildSnapshotManifest, readSnapshotLayers, type SnapshotConfig } from "./manifest.ts";
import type { SnapshotInfo, SnapshotLayer, SnapshotRecord } from "./record.ts";

export interface RegistrySnapshotsOptions {
  io: LayerIo;
  /** the writable paths, in the order every snapshot's layers hold them */
  paths: string[];
  clock: Clock;
  logger: Logger;
}

export interface PushHooks {
  onProgress?: (p: TransferProgress) => void;
  /** a durable step reached (the Snapshotter's crash-test seam) */
  step(step: "layer-pushed" | "manifest-put"): Promise<void>;
}

export class RegistrySnapshots {
  constructor(private readonly o: RegistrySnapshotsOptions) {}

  /** Pushes the snapshot of `rec`'s sandbox under `tag`; throws unless it reads back intact. */
  async push(rec: SnapshotRecord, tag: string, hooks: PushHooks, signal: AbortSignal): Promise<SnapshotInfo> {
    const { io, paths } = this.o;
    const { oci, repository } = io;
    // paths stream concurrently: each is its own archive exec and its own upload
    const layers: SnapshotLayer[] = await allLayers(paths, signal, async (path, signal) => {
      const layer = await pushLayer(io, rec.id, path, signal, (bytes) =>
        hooks.onProgress?.({ op: "pause", path, bytes }),
      );
      await hooks.step("layer-pushed");
      return layer;
    });
    const createdAt = this.o.clock.now().toISOString();
    const config: SnapshotConfig = {
      sandbox: rec.id,
      owner: rec.owner,
      generation: rec.generation,
      createdAt,
      paths,
      spec: rec.spec,
    };
    const cfg = await oci.pushSmallBlob(repository, Buffer.from(JSON.stringify(config)));
    const manifest = buildSnapshotManifest(cfg, layers, { sandbox: rec.id, createdAt });
    const put = await oci.putManifest(repository, tag, manifest);
    await hooks.step("manifest-put");
    const info: SnapshotInfo = {
      repository,
      tag,
      ref: `${oci.base.host}/${repository}@${put.digest}`,
      digest: put.digest,
      sizeBytes: layers.reduce((n, l) => n + l.size, 0),
      createdAt,
      layers,
    };
    const problem = await verifySnapshot(oci, info);
    if (problem)
      throw new UpstreamError(
        `pause ${rec.id}: snapshot ${info.ref} failed verification after push (${problem}); the sandbox keeps running, retry the pause`,
      );
    return info;
  }

  /** The snapshot a manifest (`digest`, tagged `tag`) describes, or undefined unless it is complete and intact. */
  async fromTag(tag: string, digest: string): Promise<SnapshotInfo | undefined> {
    const { oci, repository } = this.o.io;
    const { manifest } = await oci.getManifest(repository, digest);
    const layers = readSnapshotLayers(manifest);
    if (typeof layers === "string" || layers.length !== this.o.paths.length) return undefined;
    const info: SnapshotInfo = {
      repository,
      tag,
      ref: `${oci.base.host}/${repository}@${digest}`,
      digest,
      sizeBytes: layers.reduce((n, l) => n + l.size, 0),
      createdAt: manifest.annotations?.["org.opencontainers.image.created"] ?? this.o.clock.now().toISOString(),
      layers,
    };
    return (await verifySnapshot(oci, info)) ? undefined : info;
  }

  /** Best effort: a snapshot nothing needs any more; retention removes what this fails to. */
  async drop(s: SnapshotInfo): Promise<void> {
    await this.o.io.oci
      .deleteManifest(s.repository, s.digest)
      .catch((err: unknown) =>
        this.o.logger.warn(
          { op: "snapshot-gc", snapshot: s.ref, err },
          "deleting a superseded snapshot failed; retention removes it later",
        ),
      );
  }

  /** Deletes the manifest under `tag`, if there is one (a delete goes by digest). */
  async deleteTag(tag: string): Promise<void> {
    const { oci, repository } = this.o.io;
    const head = await oci.headManifest(repository, tag);
    if (head) await oci.deleteManifest(repository, head.digest);
  }
}
