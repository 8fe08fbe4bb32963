// Builds the pause/resume service (a Snapshotter under PauseResume) over the DirBackend, a
// FileRecordStore and a real registry; shared by the tests and by the crash child process.
import { createHash } from "node:crypto";
import { lstat, readdir, readFile, readlink } from "node:fs/promises";
import { join } from "node:path";
import type { Clock } from "../../runtime/core/clock.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxSpec } from "../../runtime/core/types.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import { FileRecordStore } from "../../runtime/snapshot/record.ts";
import { PauseResume } from "../../runtime/snapshot/service.ts";
import { Snapshotter, type SnapshotterOptions } from "../../runtime/snapshot/snapshotter.ts";
import { DirBackend } from "./dir-backend.ts";

export function makeSpec(id: string, metadata: Record<string, string> = {}): SandboxSpec {
  return {
    id,
    owner: "alice",
    image: { profile: "base", image: "host" },
    size: {
      name: "nano",
      cpuRequestMillis: 100,
      cpuLimitMillis: 1000,
      memoryRequestBytes: 128 << 20,
      memoryLimitBytes: 512 << 20,
      workspaceBytes: 1 << 30,
      tmpBytes: 256 << 20,
      pids: 128,
    },
    env: {},
    ttlSeconds: 3600,
    idleTimeoutSeconds: 0,
    metadata,
    createdAt: new Date("2026-01-01T00:00:00Z"),
  };
}

export interface Fixture {
  backend: DirBackend;
  store: FileRecordStore;
  oci: OciClient;
  /** the pause/resume service (its engine: snapshotter.snapshotter) */
  snapshotter: PauseResume;
  specs: Map<string, SandboxSpec>;
}

export function makeFixture(
  root: string,
  registryUrl: string,
  extra: Partial<SnapshotterOptions> & { clock?: Clock } = {},
): Fixture {
  const backend = new DirBackend(join(root, "sandboxes"));
  const store = new FileRecordStore(join(root, "records"));
  const oci = new OciClient({ registry: registryUrl, chunkBytes: 4 << 20 });
  const specs = new Map<string, SandboxSpec>();
  const engine = new Snapshotter({
    backend,
    compute: backend.compute,
    oci,
    repository: "sbx-snapshots",
    store,
    clock: extra.clock ?? systemClock,
    logger: silentLogger(),
    retentionDays: 7,
    specFor: async (s) => specs.get(s.id) ?? makeSpec(s.id, s.metadata),
    ...extra,
  });
  const snapshotter = new PauseResume({ backend, snapshotter: engine, logger: silentLogger() });
  return { backend, store, oci, snapshotter, specs };
}

/** sha256 over every entry (path, type, mode, content or link target) under dir, in sorted order. */
export async function treeDigest(dir: string): Promise<{ digest: string; entries: number; bytes: number }> {
  const hash = createHash("sha256");
  let entries = 0;
  let bytes = 0;
  const walk = async (rel: string): Promise<void> => {
    const names = (await readdir(join(dir, rel))).sort();
    for (const n of names) {
      const p = join(rel, n);
      const st = await lstat(join(dir, p));
      entries++;
      hash.update(`${p}\0${st.mode}\0`);
      if (st.isSymbolicLink()) hash.update(`link:${await readlink(join(dir, p))}\0`);
      else if (st.isDirectory()) await walk(p);
      else {
        const data = await readFile(join(dir, p));
        bytes += data.length;
        hash.update(data);
      }
    }
  };
  await walk("");
  return { digest: hash.digest("hex"), entries, bytes };
}
