// Pure: what a snapshot artifact looks like in the registry. One OCI image manifest per
// pause, artifactType application/vnd.sbx.snapshot.v1, a JSON config naming the sandbox, and
// one uncompressed tar layer per writable path. Uncompressed because on loopback and in-region
// links gzip at ~100 MB/s per core is the bottleneck, and workspaces of random or already
// compressed data gain nothing from it.
import type { Descriptor, OciManifest } from "./oci.ts";
import { OCI_MANIFEST } from "./oci.ts";
import type { SnapshotLayer, StoredSpec } from "./record.ts";

export const SNAPSHOT_ARTIFACT_TYPE = "application/vnd.sbx.snapshot.v1";
export const SNAPSHOT_CONFIG_TYPE = "application/vnd.sbx.snapshot.config.v1+json";
export const SNAPSHOT_LAYER_TYPE = "application/vnd.sbx.snapshot.layer.v1.tar";
export const PATH_ANNOTATION = "dev.sbx.snapshot.path";
export const SANDBOX_ANNOTATION = "dev.sbx.sandbox";

export interface SnapshotConfig {
  sandbox: string;
  owner: string;
  generation: number;
  createdAt: string;
  paths: string[];
  spec: StoredSpec;
}

/** Tag of the n-th snapshot of a sandbox: distinct per pause so a new one never overwrites the last verified one. */
export function snapshotTag(id: string, generation: number): string {
  return `${id}-g${generation}`.slice(0, 128);
}

export function buildSnapshotManifest(
  config: Descriptor,
  layers: SnapshotLayer[],
  meta: { sandbox: string; createdAt: string },
): OciManifest {
  return {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST,
    artifactType: SNAPSHOT_ARTIFACT_TYPE,
    config: { mediaType: SNAPSHOT_CONFIG_TYPE, digest: config.digest, size: config.size },
    layers: layers.map((l) => ({
      mediaType: SNAPSHOT_LAYER_TYPE,
      digest: l.digest,
      size: l.size,
      annotations: { [PATH_ANNOTATION]: l.path },
    })),
    annotations: { [SANDBOX_ANNOTATION]: meta.sandbox, "org.opencontainers.image.created": meta.createdAt },
  };
}

/** The layers a manifest promises, or a reason it is not one of our snapshots. */
export function readSnapshotLayers(m: OciManifest): SnapshotLayer[] | string {
  if (m.artifactType !== SNAPSHOT_ARTIFACT_TYPE)
    return `artifactType is ${JSON.stringify(m.artifactType)}, not ${SNAPSHOT_ARTIFACT_TYPE}`;
  const out: SnapshotLayer[] = [];
  for (const l of m.layers) {
    const path = l.annotations?.[PATH_ANNOTATION];
    if (l.mediaType !== SNAPSHOT_LAYER_TYPE || !path) return `layer ${l.digest} is not a snapshot layer`;
    out.push({ path, digest: l.digest, size: l.size });
  }
  return out;
}

/** The directory a path's archive unpacks into: archives are rooted at the path's basename. */
export function parentDir(path: string): string {
  const p = path.replace(/\/+$/, "");
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}
