// The durable record of a sandbox's pause/resume state machine. It is written before and
// after every step that changes where the sandbox's data lives, so that after a crash the
// recovery pass (Snapshotter.recover) can always finish or undo the step:
//   running -> pausing -> paused (computeReleased false -> true) -> resuming -> running
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Sandbox, SandboxSpec } from "../core/types.ts";
import { ValidationError } from "../core/errors.ts";
import { readJsonIfExists, writeJsonAtomic } from "../core/jsonFile.ts";

export type SnapshotState = "running" | "pausing" | "paused" | "resuming";

export interface SnapshotLayer {
  /** absolute writable path inside the sandbox, e.g. /workspace */
  path: string;
  digest: string;
  size: number;
  /** tar entries in the layer; 0 = nothing to restore (absent in records from before it existed) */
  entries?: number;
}

export interface SnapshotInfo {
  repository: string;
  tag: string;
  /** registry/repository@digest of the manifest */
  ref: string;
  digest: string;
  /** sum of layer sizes */
  sizeBytes: number;
  createdAt: string;
  layers: SnapshotLayer[];
}

/** SandboxSpec as JSON (createdAt as an ISO string). */
export type StoredSpec = Omit<SandboxSpec, "createdAt"> & { createdAt: string };

export interface SnapshotRecord {
  id: string;
  owner: string;
  state: SnapshotState;
  /** increments with every pause; names the manifest tag */
  generation: number;
  /** the verified snapshot while paused or resuming */
  snapshot?: SnapshotInfo;
  /** a pause in flight: its tag, so recovery can find or remove a half-written manifest */
  pending?: { tag: string; startedAt: string };
  /** true once the compute of a paused sandbox is gone */
  computeReleased?: boolean;
  /** what resume needs to start compute again */
  spec: StoredSpec;
  /** the sandbox as last seen running: describe() of a paused sandbox answers from it */
  sandbox: Sandbox;
  /** may calls that need a running sandbox (exec, files) resume it */
  autoResume: boolean;
  /** the runtime process that wrote it last: another replica leaves its in-flight steps alone */
  holder?: string;
  updatedAt: string;
}

/** Where records live. Kubernetes: the Sandbox CR status; local: files. put resolves once durable. */
export interface SnapshotRecordStore {
  get(id: string): Promise<SnapshotRecord | undefined>;
  put(record: SnapshotRecord): Promise<void>;
  delete(id: string): Promise<void>;
  list(): Promise<SnapshotRecord[]>;
}

export function toStoredSpec(spec: SandboxSpec): StoredSpec {
  return { ...spec, createdAt: spec.createdAt.toISOString() };
}

export function fromStoredSpec(spec: StoredSpec): SandboxSpec {
  return { ...spec, createdAt: new Date(spec.createdAt) };
}

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** One JSON file per sandbox, replaced atomically (write temp, fsync, rename, fsync dir). */
export class FileRecordStore implements SnapshotRecordStore {
  constructor(private readonly dir: string) {}

  private file(id: string): string {
    if (!ID_RE.test(id))
      throw new ValidationError("sandbox id", id, "use letters, digits, '.', '_' or '-' (at most 128)");
    return join(this.dir, `${id}.json`);
  }

  get(id: string): Promise<SnapshotRecord | undefined> {
    return readJsonIfExists<SnapshotRecord>(this.file(id));
  }

  async put(record: SnapshotRecord): Promise<void> {
    await writeJsonAtomic(this.dir, this.file(record.id), record);
  }

  async delete(id: string): Promise<void> {
    await rm(this.file(id), { force: true });
  }

  async list(): Promise<SnapshotRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const out: SnapshotRecord[] = [];
    for (const n of names) {
      if (!n.endsWith(".json")) continue;
      const r = await this.get(n.slice(0, -".json".length));
      if (r) out.push(r);
    }
    return out;
  }
}
