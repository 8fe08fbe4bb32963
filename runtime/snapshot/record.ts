// The durable record of a sandbox's pause/resume state machine. It is written before and
// after every step that changes where the sandbox's data lives, so that after a crash the
// recovery pass (Snapshotter.recover) can always finish or undo the step:
//   running -> pausing -> paused (computeReleased false -> true) -> resuming -> running
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { ValidationError } from "../core/errors.ts";
import { readJsonIfExists, writeJsonAtomic } from "../core/jsonFile.ts";
import type { Sandbox, SandboxSpec } from "../core/types.ts";

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

/**
 * One JSON file per sandbox, replaced atomically (write temp, fsync, rename, fsync dir).
 *
 * `soleWriter`: this process is the only one that writes `dir` (the local service owns its state
 * dir), so every record is read from disk once and then answered from memory: the Manager asks
 * for a record on every call on a sandbox (exec, files, each relayed port request), and a file
 * read per ask (an ENOENT exception for a sandbox never paused) was the largest cost of a relayed
 * request. The memory copy changes only after the disk write it mirrors resolved, so a reader
 * never sees a state that is not durable; a failed write drops the whole copy and the next read
 * reloads it from disk. Without it (tests whose crash child writes the same dir) every read goes
 * to disk.
 */
export class FileRecordStore implements SnapshotRecordStore {
  /** every record in dir by id, once loaded (soleWriter only) */
  private cache?: Promise<Map<string, SnapshotRecord>>;

  constructor(
    private readonly dir: string,
    private readonly opts: { soleWriter?: boolean } = {},
  ) {}

  private file(id: string): string {
    if (!ID_RE.test(id))
      throw new ValidationError("sandbox id", id, "use letters, digits, '.', '_' or '-' (at most 128)");
    return join(this.dir, `${id}.json`);
  }

  async get(id: string): Promise<SnapshotRecord | undefined> {
    const file = this.file(id); // a malformed id is a 400 whether or not the copy is loaded
    if (!this.opts.soleWriter) return readJsonIfExists<SnapshotRecord>(file);
    return (await this.cached()).get(id);
  }

  async put(record: SnapshotRecord): Promise<void> {
    await this.mirrored(
      () => writeJsonAtomic(this.dir, this.file(record.id), record),
      (m) => m.set(record.id, record),
    );
  }

  async delete(id: string): Promise<void> {
    await this.mirrored(
      () => rm(this.file(id), { force: true }),
      (m) => m.delete(id),
    );
  }

  async list(): Promise<SnapshotRecord[]> {
    if (this.opts.soleWriter) return [...(await this.cached()).values()];
    return this.readAll();
  }

  /** The disk write, then (once it is durable) the same change to the memory copy. */
  private async mirrored(write: () => Promise<void>, apply: (m: Map<string, SnapshotRecord>) => void): Promise<void> {
    if (!this.opts.soleWriter) return write();
    await this.cached(); // loaded before the write: a load that raced it could miss the new file
    try {
      await write();
    } catch (err) {
      this.cache = undefined; // the disk may hold either version now: read it again
      throw err;
    }
    // the current copy, which may have been reloaded meanwhile (after another write failed)
    apply(await this.cached());
  }

  private cached(): Promise<Map<string, SnapshotRecord>> {
    if (!this.cache) {
      const loading = this.readAll().then((all) => new Map(all.map((r) => [r.id, r])));
      this.cache = loading;
      loading.catch(() => {
        if (this.cache === loading) this.cache = undefined; // an unreadable dir is tried again next time
      });
    }
    return this.cache;
  }

  private async readAll(): Promise<SnapshotRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const out: SnapshotRecord[] = [];
    for (const n of names) {
      const id = n.slice(0, -".json".length);
      // temp files of a write in flight, and anything not named by an id, are no records
      if (!n.endsWith(".json") || !ID_RE.test(id)) continue;
      const r = await readJsonIfExists<SnapshotRecord>(this.file(id));
      if (r) out.push(r);
    }
    return out;
  }
}
