// A delete that stops a pause or resume must stop every byte of it: the abort can land while a
// layer still awaits its stream (the archive exec, the blob GET), and while another layer of the
// same transfer runs. Driven with deferred streams, so each ordering is forced, not hoped for.
import { PassThrough, type Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { allLayers, type LayerIo, pushLayer, restoreLayer } from "./layers.ts";
import type { OciClient } from "./oci.ts";
import type { SnapshotInfo, SnapshotLayer } from "./record.ts";

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((res) => {
    resolve = res;
  });
  return { promise, resolve };
}

const settle = () => new Promise((r) => setImmediate(r));
const stopped = () => new Error("sandbox sb is being deleted; its pause or resume was stopped");

const layer: SnapshotLayer = { path: "/workspace", digest: "sha256:00", size: 10, entries: 3 };
const snap = { repository: "sbx-snapshots", layers: [layer] } as unknown as SnapshotInfo;

describe("a layer whose stream opens after the abort", () => {
  it("restore: the blob stream is closed and nothing is unpacked", async () => {
    const blob = deferred<Readable>();
    let unpacks = 0;
    const io = {
      backend: { putArchive: async () => void unpacks++, getArchive: async () => new PassThrough() },
      oci: {
        pullBlob: () => {
          opening.resolve();
          return blob.promise;
        },
      } as unknown as OciClient,
      repository: "sbx-snapshots",
    } as LayerIo;
    const opening = deferred();
    const ctl = new AbortController();
    const restoring = restoreLayer(io, "sb", snap, layer, ctl.signal);
    await opening.promise; // the GET is in flight
    ctl.abort(stopped());
    const stream = new PassThrough();
    blob.resolve(stream);
    await expect(restoring).rejects.toThrow(/being deleted/);
    expect(unpacks).toBe(0);
    expect(stream.destroyed).toBe(true);
  });

  it("push: the archive is closed and no upload starts", async () => {
    const archive = deferred<Readable>();
    let uploads = 0;
    const io = {
      backend: {
        getArchive: () => {
          opening.resolve();
          return archive.promise;
        },
        putArchive: async () => undefined,
      },
      oci: {
        pushBlob: async () => {
          uploads++;
          return { digest: "sha256:00", size: 0 };
        },
      } as unknown as OciClient,
      repository: "sbx-snapshots",
    } as LayerIo;
    const opening = deferred();
    const ctl = new AbortController();
    const pushing = pushLayer(io, "sb", "/workspace", ctl.signal);
    await opening.promise; // the archive exec is opening
    ctl.abort(stopped());
    const raw = new PassThrough();
    archive.resolve(raw);
    await expect(pushing).rejects.toThrow(/being deleted/);
    expect(uploads).toBe(0);
    expect(raw.destroyed).toBe(true);
  });
});

describe("an abort while the upload is not reading the archive", () => {
  // another layer's progress deletes the sandbox while this one still awaits its upload's POST
  it("rejects with the abort's reason, and the archive's error is not an uncaught exception", async () => {
    const ctl = new AbortController();
    const raw = new PassThrough();
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown) => uncaught.push(e);
    process.prependListener("uncaughtException", onUncaught);
    const io = {
      backend: { getArchive: async () => raw, putArchive: async () => undefined },
      oci: {
        pushBlob: async (_repo: string, source: Readable) => {
          ctl.abort(stopped()); // during the POST: nothing reads the source yet
          await settle();
          await settle();
          for await (const _ of source);
          return { digest: "sha256:00", size: 512 };
        },
      } as unknown as OciClient,
      repository: "sbx-snapshots",
    } as LayerIo;
    try {
      await expect(pushLayer(io, "sb", "/workspace", ctl.signal)).rejects.toThrow(/being deleted/);
      await settle();
    } finally {
      process.removeListener("uncaughtException", onUncaught);
    }
    expect(uncaught).toEqual([]);
  });
});

describe("allLayers", () => {
  it("the first failure stops the others, and the call settles only after every one has", async () => {
    const other = deferred();
    let otherSignal: AbortSignal | undefined;
    let done = false;
    const all = allLayers(["a", "b"], new AbortController().signal, async (item, signal) => {
      if (item === "a") {
        await settle();
        throw new Error("digest mismatch in a");
      }
      otherSignal = signal;
      await other.promise; // b is still writing when a fails
      return item;
    }).finally(() => {
      done = true;
    });
    all.catch(() => undefined);
    await settle();
    await settle();
    expect(otherSignal?.aborted).toBe(true);
    expect((otherSignal!.reason as Error).message).toBe("digest mismatch in a");
    expect(done).toBe(false);
    other.resolve();
    await expect(all).rejects.toThrow("digest mismatch in a");
  });

  it("the caller's abort is the reason, and the results come in order when all succeed", async () => {
    expect(await allLayers([2, 1], new AbortController().signal, async (n) => n * 10)).toEqual([20, 10]);
    const ctl = new AbortController();
    const all = allLayers([1, 2], ctl.signal, (_n, signal) => {
      return new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("stream closed"))));
    });
    ctl.abort(stopped());
    await expect(all).rejects.toThrow(/being deleted/);
  });
});
