// What the E2B layer must remember per sandbox beyond what the Manager keeps: the timeout end a
// setTimeout/connect moved, and an access token minted on connect for a sandbox created through
// our own API (one created through E2B carries its token hash in reserved metadata instead).
// Kept in memory and, when a path is given (the local platform's state dir), in a JSON file, so
// both survive a restart there. Without a file (Kubernetes) they are this replica's alone: see
// docs/e2b.md, "Control plane (REST)".
import { dirname } from "node:path";
import { readJsonIfExists, writeJsonAtomic } from "../../core/jsonFile.ts";

export interface E2bRecord {
  owner: string;
  /** the timeout end, ms since the epoch; absent = the create-time end in metadata */
  endAt?: number;
  /** sha256 hex of an access token minted on connect */
  tokenHash?: string;
}

export class E2bStore {
  private readonly records = new Map<string, E2bRecord>();
  private writing: Promise<void> = Promise.resolve();

  private constructor(private readonly path: string | undefined) {}

  static async open(path?: string): Promise<E2bStore> {
    const store = new E2bStore(path);
    const saved = path ? await readJsonIfExists<Record<string, E2bRecord>>(path) : undefined;
    for (const [id, r] of Object.entries(saved ?? {})) {
      if (r && typeof r.owner === "string") store.records.set(id, r);
    }
    return store;
  }

  get(id: string): E2bRecord | undefined {
    return this.records.get(id);
  }

  entries(): [string, E2bRecord][] {
    return [...this.records];
  }

  /** Merge `patch` into the sandbox's record; resolves once it is on disk (when there is a file). */
  async update(id: string, owner: string, patch: Partial<Omit<E2bRecord, "owner">>): Promise<void> {
    this.records.set(id, { ...this.records.get(id), ...patch, owner });
    await this.save();
  }

  async forget(id: string): Promise<void> {
    if (this.records.delete(id)) await this.save();
  }

  /** Writes one after another, each with the whole map as it is then (atomic replace). */
  private save(): Promise<void> {
    const path = this.path;
    if (!path) return Promise.resolve();
    const next = this.writing.then(() => writeJsonAtomic(dirname(path), path, Object.fromEntries(this.records)));
    // a failed write must not wedge the later ones; the caller of this one still sees it fail
    this.writing = next.catch(() => undefined);
    return next;
  }
}
