// The file record store's read-cache (soleWriter): after one load every read is answered from
// memory, and the memory copy only ever shows what is durable on disk.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Sandbox } from "../core/types.ts";
import { FileRecordStore, type SnapshotRecord, type SnapshotState } from "./record.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function storeDir(): string {
  const d = mkdtempSync(join(tmpdir(), "sbx-records-"));
  dirs.push(d);
  return join(d, "records");
}

function record(id: string, state: SnapshotState): SnapshotRecord {
  const sandbox = { id, owner: "alice", phase: "Running", metadata: {} } as unknown as Sandbox;
  return {
    id,
    owner: "alice",
    state,
    generation: 1,
    spec: {} as SnapshotRecord["spec"],
    sandbox,
    autoResume: true,
    updatedAt: new Date(0).toISOString(),
  };
}

describe("FileRecordStore with soleWriter", () => {
  it("answers reads from memory once loaded: the files are not read again", async () => {
    const dir = storeDir();
    await new FileRecordStore(dir).put(record("sb-a", "paused"));
    const store = new FileRecordStore(dir, { soleWriter: true });
    expect((await store.get("sb-a"))?.state).toBe("paused");
    rmSync(dir, { recursive: true, force: true });
    // gone from disk, still known: no read happened (without the cache this is undefined)
    expect((await store.get("sb-a"))?.state).toBe("paused");
    expect(await store.get("sb-never")).toBeUndefined();
  });

  it("shows every put and delete once durable, and a new store reads the same from disk", async () => {
    const dir = storeDir();
    const store = new FileRecordStore(dir, { soleWriter: true });
    expect(await store.get("sb-b")).toBeUndefined(); // loaded while empty
    await store.put(record("sb-b", "pausing"));
    await store.put(record("sb-b", "paused"));
    await store.put(record("sb-c", "resuming"));
    expect((await store.get("sb-b"))?.state).toBe("paused");
    expect((await store.list()).map((r) => r.id).sort()).toEqual(["sb-b", "sb-c"]);
    await store.delete("sb-c");
    expect(await store.get("sb-c")).toBeUndefined();
    const fresh = new FileRecordStore(dir);
    expect((await fresh.get("sb-b"))?.state).toBe("paused");
    expect(await fresh.get("sb-c")).toBeUndefined();
  });

  it("after a failed write reads the disk again instead of trusting memory", async () => {
    const dir = storeDir();
    const store = new FileRecordStore(dir, { soleWriter: true });
    await store.put(record("sb-d", "paused"));
    // a directory where the file goes makes the rename fail
    rmSync(join(dir, "sb-d.json"));
    mkdirSync(join(dir, "sb-d.json"));
    await expect(store.put(record("sb-d", "resuming"))).rejects.toThrow();
    rmSync(join(dir, "sb-d.json"), { recursive: true });
    writeFileSync(join(dir, "sb-d.json"), JSON.stringify(record("sb-d", "running")));
    expect((await store.get("sb-d"))?.state).toBe("running");
  });

  it("still refuses a malformed id, and ignores files not named by an id", async () => {
    const dir = storeDir();
    const store = new FileRecordStore(dir, { soleWriter: true });
    await store.put(record("sb-e", "paused"));
    writeFileSync(join(dir, "not an id.json"), "{}");
    writeFileSync(join(dir, "sb-e.json.123.tmp"), "{");
    const reloaded = new FileRecordStore(dir, { soleWriter: true });
    expect((await reloaded.list()).map((r) => r.id)).toEqual(["sb-e"]);
    await expect(reloaded.get("../etc/passwd")).rejects.toThrow(/sandbox id: invalid value/);
  });
});
