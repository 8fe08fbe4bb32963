// The pause/resume record (runtime/snapshot/record.ts) kept in the Sandbox object, so it is
// as durable as the sandbox itself and every replica sees it: the whole record as JSON in an
// annotation, plus `status.snapshot` for kubectl and dashboards.
//
// Two replicas must never both drive one transition. Each write is a compare-and-swap on the
// record itself: the store remembers the record text it last read or wrote for a sandbox, and
// a write goes through only if the object still holds exactly that text, guarded by the
// object's resourceVersion. A conflict caused by an unrelated write (activity annotation,
// reconciler status) is retried on a fresh read; a changed record is a ConflictError.
import type { CustomObjectsApi } from "@kubernetes/client-node";
import { ConflictError, NotFoundError } from "../core/errors.ts";
import type { SnapshotRecord, SnapshotRecordStore } from "../snapshot/record.ts";
import { isConflict, isNotFound, mergePatch, toDomainError } from "./client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { SandboxResource } from "./resource.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

export const SNAPSHOT_RECORD_ANNOTATION = "sbx.dev/snapshot-record";

const MAX_CAS_ATTEMPTS = 8;

export class SandboxRecordStore implements SnapshotRecordStore {
  /** record text last read or written per sandbox (null: known to have none) */
  private readonly seen = new Map<string, string | null>();
  private readonly parsed = new Map<string, { text: string; record: SnapshotRecord }>();
  private readonly crApi: { group: string; version: string; namespace: string; plural: string };

  constructor(
    private readonly o: {
      namespace: string;
      custom: CustomObjectsApi;
      index: SandboxIndex;
      /** resolves once a just-accepted sandbox's object is written (write-behind creates) */
      settled?(id: string): Promise<void>;
    },
  ) {
    this.crApi = { group: API_GROUP, version: API_VERSION, namespace: o.namespace, plural: SANDBOX_PLURAL };
  }

  async get(id: string): Promise<SnapshotRecord | undefined> {
    const cr = this.o.index.resource(id);
    const text = cr?.metadata.annotations?.[SNAPSHOT_RECORD_ANNOTATION] ?? null;
    this.seen.set(id, text);
    return text === null ? undefined : this.parse(id, text);
  }

  async list(): Promise<SnapshotRecord[]> {
    const out: SnapshotRecord[] = [];
    for (const id of this.o.index.resourceIds()) {
      const r = await this.get(id);
      if (r) out.push(r);
    }
    return out;
  }

  async put(record: SnapshotRecord): Promise<void> {
    const text = JSON.stringify(record);
    await this.swap(record.id, text);
    await this.writeSnapshotStatus(record);
  }

  async delete(id: string): Promise<void> {
    try {
      await this.swap(id, null);
      await this.writeSnapshotStatus(undefined, id);
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
    this.seen.delete(id);
    this.parsed.delete(id);
  }

  /** Replaces the record text with `next` if it still is what this store last saw. */
  private async swap(id: string, next: string | null): Promise<void> {
    await this.o.settled?.(id);
    let cr = this.o.index.resource(id);
    for (let attempt = 1; ; attempt++) {
      if (!cr) cr = await this.read(id);
      const current = cr.metadata.annotations?.[SNAPSHOT_RECORD_ANNOTATION] ?? null;
      const expected = this.seen.has(id) ? this.seen.get(id)! : current;
      if (current !== expected) {
        // the cache may just be behind our own earlier write: decide on a fresh read
        if (attempt === 1) {
          cr = undefined;
          continue;
        }
        throw new ConflictError(
          `sandbox ${id}: its pause/resume record was changed by another runtime replica meanwhile; retry the operation`,
          { id },
        );
      }
      if (current === next) return;
      try {
        const updated = (await this.o.custom.patchNamespacedCustomObject(
          {
            ...this.crApi,
            name: id,
            body: {
              metadata: {
                resourceVersion: cr.metadata.resourceVersion,
                annotations: { [SNAPSHOT_RECORD_ANNOTATION]: next },
              },
            },
          },
          mergePatch,
        )) as SandboxResource;
        this.o.index.own.upsertResource(updated);
        this.seen.set(id, next);
        return;
      } catch (err) {
        if (isNotFound(err)) throw new NotFoundError("sandbox", id);
        if (!isConflict(err) || attempt >= MAX_CAS_ATTEMPTS)
          throw toDomainError(err, "write the pause/resume record", { kind: "sandbox", name: id });
        cr = undefined; // another write moved the resourceVersion: look again
      }
    }
  }

  private async read(id: string): Promise<SandboxResource> {
    try {
      const cr = (await this.o.custom.getNamespacedCustomObject({ ...this.crApi, name: id })) as SandboxResource;
      this.o.index.own.upsertResource(cr);
      return cr;
    } catch (err) {
      if (isNotFound(err)) throw new NotFoundError("sandbox", id);
      throw toDomainError(err, "read the pause/resume record", { kind: "sandbox", name: id });
    }
  }

  /** status.snapshot mirrors the verified snapshot while paused; best effort (the annotation is the truth). */
  private async writeSnapshotStatus(record: SnapshotRecord | undefined, id = record?.id ?? ""): Promise<void> {
    const s = record && record.state !== "running" ? record.snapshot : undefined;
    const want = s ? { ref: s.ref, digest: s.digest, sizeBytes: s.sizeBytes, createdAt: s.createdAt } : undefined;
    const have = this.o.index.resource(id)?.status?.snapshot;
    if (JSON.stringify(have) === JSON.stringify(want)) return;
    try {
      const updated = (await this.o.custom.patchNamespacedCustomObjectStatus(
        { ...this.crApi, name: id, body: { status: { snapshot: want ?? null } } },
        mergePatch,
      )) as SandboxResource;
      this.o.index.own.upsertResource(updated);
    } catch (err) {
      if (!isNotFound(err)) throw toDomainError(err, "write status.snapshot", { kind: "sandbox", name: id });
    }
  }

  private parse(id: string, text: string): SnapshotRecord {
    const hit = this.parsed.get(id);
    if (hit?.text === text) return hit.record;
    const record = JSON.parse(text) as SnapshotRecord;
    this.parsed.set(id, { text, record });
    return record;
  }
}
