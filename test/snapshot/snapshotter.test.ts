// Pause/resume orchestration against a real registry, real tar and real processes (DirBackend).
import { execFile, spawn } from "node:child_process";
import { chmod, mkdir, open, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../runtime/core/clock.ts";
import { ConflictError } from "../../runtime/core/errors.ts";
import { DigestMismatchError } from "../../runtime/snapshot/digest.ts";
import { snapshotTag } from "../../runtime/snapshot/manifest.ts";
import type { PauseStep, ResumeStep } from "../../runtime/snapshot/snapshotter.ts";
import { captureLogger, LEVEL } from "../support/logs.ts";
import { snapshotTestEnv } from "./env.ts";
import { type Fixture, makeFixture, makeSpec, treeDigest } from "./fixture.ts";

const run = promisify(execFile);

const env = snapshotTestEnv("sbx-snap-");

/** Starts sandbox `id` and fills its writable paths with varied content; returns the tree digest. */
async function seeded(f: Fixture, id: string, mb = 8, metadata: Record<string, string> = {}) {
  const spec = makeSpec(id, metadata);
  f.specs.set(id, spec);
  await f.backend.provision(spec);
  const fs = f.backend.fsRoot(id);
  await run("dd", ["if=/dev/urandom", `of=${join(fs, "workspace/big.bin")}`, "bs=1M", `count=${mb}`, "status=none"]);
  await mkdir(join(fs, "workspace/src/deep/er"), { recursive: true });
  await mkdir(join(fs, "workspace/empty-dir"));
  await writeFile(join(fs, "workspace/src/deep/er/main.py"), "print('hello')\n");
  await writeFile(join(fs, "workspace/run.sh"), "#!/bin/sh\necho hi\n");
  await chmod(join(fs, "workspace/run.sh"), 0o755);
  await symlink("src/deep/er/main.py", join(fs, "workspace/link.py"));
  await writeFile(join(fs, "tmp/scratch.txt"), `marker ${id}\n`);
  return treeDigest(fs);
}

describe("Snapshotter", () => {
  it("pauses (compute released, verified manifest recorded) and resumes byte for byte", async () => {
    const f = makeFixture(env.root, env.registry.url);
    const before = await seeded(f, "sb-roundtrip", 32);
    const progress: number[] = [];
    const rec = await f.snapshotter.pause("sb-roundtrip", { onProgress: (p) => progress.push(p.bytes) });
    expect(rec.state).toBe("paused");
    expect(rec.computeReleased).toBe(true);
    expect(await f.backend.hasCompute("sb-roundtrip")).toBe(false);
    expect(rec.snapshot!.layers.map((l) => l.path)).toEqual(["/workspace", "/tmp"]);
    expect(rec.snapshot!.sizeBytes).toBeGreaterThan(32 << 20);
    expect(Math.max(...progress)).toBeGreaterThan(32 << 20);
    expect(await f.oci.headManifest("sbx-snapshots", rec.snapshot!.tag)).toEqual({
      digest: rec.snapshot!.digest,
      size: expect.any(Number),
    });
    expect((await f.store.get("sb-roundtrip"))!.state).toBe("paused");

    const s = await f.snapshotter.resume("sb-roundtrip");
    expect(s.phase).toBe("Running");
    expect(s.owner).toBe("alice");
    expect(await treeDigest(f.backend.fsRoot("sb-roundtrip"))).toEqual(before);
    expect((await f.store.get("sb-roundtrip"))!.state).toBe("running");
    // the consumed snapshot is deleted once the sandbox runs again
    expect(await f.oci.headManifest("sbx-snapshots", rec.snapshot!.tag)).toBeUndefined();
    f.oci.close();
  });

  it("pausing twice is one pause; resuming a running sandbox does nothing", async () => {
    const f = makeFixture(env.root, env.registry.url);
    await seeded(f, "sb-idem", 1);
    let adopts = 0;
    const adopt = f.backend.adopt.bind(f.backend);
    f.backend.adopt = (spec) => {
      adopts++;
      return adopt(spec);
    };
    const [a, b] = await Promise.all([f.snapshotter.pause("sb-idem"), f.snapshotter.pause("sb-idem")]);
    const c = await f.snapshotter.pause("sb-idem");
    expect(a.snapshot!.digest).toBe(b.snapshot!.digest);
    expect(c.snapshot!.digest).toBe(a.snapshot!.digest);
    expect(c.generation).toBe(1);
    await f.snapshotter.resume("sb-idem");
    expect(adopts).toBe(1);
    const again = await f.snapshotter.resume("sb-idem");
    expect(again.phase).toBe("Running");
    expect(adopts).toBe(1);
    f.oci.close();
  });

  it("concurrent resume calls share one operation", async () => {
    const f = makeFixture(env.root, env.registry.url);
    const before = await seeded(f, "sb-concurrent", 4);
    await f.snapshotter.pause("sb-concurrent");
    let adopts = 0;
    const adopt = f.backend.adopt.bind(f.backend);
    f.backend.adopt = (spec) => {
      adopts++;
      return adopt(spec);
    };
    const all = await Promise.all([1, 2, 3, 4].map(() => f.snapshotter.resume("sb-concurrent")));
    expect(adopts).toBe(1);
    expect(new Set(all.map((s) => s.id))).toEqual(new Set(["sb-concurrent"]));
    expect(await treeDigest(f.backend.fsRoot("sb-concurrent"))).toEqual(before);
    f.oci.close();
  });

  it("a failed resume (corrupt layer) leaves the snapshot intact and a retry succeeds", async () => {
    const f = makeFixture(env.root, env.registry.url);
    const before = await seeded(f, "sb-retry", 2);
    const rec = await f.snapshotter.pause("sb-retry");
    const layer = rec.snapshot!.layers[0];
    const hex = layer.digest.slice("sha256:".length);
    const file = join(env.registry.storageDir, "docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
    const fh = await open(file, "r+");
    const orig = Buffer.alloc(1);
    await fh.read(orig, 0, 1, 5000);
    await fh.write(Buffer.from([orig[0] ^ 0xff]), 0, 1, 5000);
    await expect(f.snapshotter.resume("sb-retry")).rejects.toThrow(DigestMismatchError);
    const after = await f.store.get("sb-retry");
    expect(after!.state).toBe("paused");
    expect(after!.snapshot!.digest).toBe(rec.snapshot!.digest);
    expect(await f.backend.hasCompute("sb-retry")).toBe(false);
    await fh.write(orig, 0, 1, 5000);
    await fh.close();
    await f.snapshotter.resume("sb-retry");
    expect(await treeDigest(f.backend.fsRoot("sb-retry"))).toEqual(before);
    f.oci.close();
  });

  it("runs the pre-pause and post-resume hooks; a failing pre-pause hook keeps the sandbox running", async () => {
    const f = makeFixture(env.root, env.registry.url);
    await seeded(f, "sb-hooks", 1, {
      "sbx.pre-pause": 'echo flushed > "$SBX_FS/workspace/flushed"',
      "sbx.post-resume": 'echo woke > "$SBX_FS/tmp/woke"',
    });
    await f.snapshotter.pause("sb-hooks");
    await f.snapshotter.resume("sb-hooks");
    const fs = f.backend.fsRoot("sb-hooks");
    expect((await treeDigest(join(fs, "workspace"))).entries).toBeGreaterThan(0);
    await expect(run("cat", [join(fs, "workspace/flushed"), join(fs, "tmp/woke")])).resolves.toMatchObject({
      stdout: "flushed\nwoke\n",
    });

    await seeded(f, "sb-badhook", 1, { "sbx.pre-pause": "echo db busy >&2; exit 3" });
    const err = await f.snapshotter.pause("sb-badhook").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as Error).message).toMatch(
      /pre-pause hook of sandbox sb-badhook exited 3: db busy; fix the hook command/,
    );
    expect(await f.backend.hasCompute("sb-badhook")).toBe(true);
    expect((await f.store.get("sb-badhook"))!.state).toBe("running");
    f.oci.close();
  });

  it("a failing compute release after the snapshot is recorded is retried, and reported without losing the snapshot", async () => {
    const f = makeFixture(env.root, env.registry.url);
    const before = await seeded(f, "sb-release", 1);
    const release = f.backend.releaseCompute.bind(f.backend);
    let failures = 4;
    f.backend.releaseCompute = async (id) => {
      if (failures-- > 0) throw new Error("ENOTEMPTY: directory not empty");
      return release(id);
    };
    const err = await f.snapshotter.pause("sb-release").catch((e: unknown) => e);
    expect((err as Error).message).toMatch(
      /^pause sb-release: the snapshot .* is recorded, but releasing the compute failed 3 times: ENOTEMPTY: directory not empty; the next pause call or a restart retries it$/,
    );
    expect(await f.store.get("sb-release")).toMatchObject({ state: "paused", computeReleased: false });
    // one more failure is absorbed by the retry, then the release goes through
    const rec = await f.snapshotter.pause("sb-release");
    expect(rec).toMatchObject({ state: "paused", computeReleased: true, generation: 1 });
    expect(await f.backend.hasCompute("sb-release")).toBe(false);
    await f.snapshotter.resume("sb-release");
    expect(await treeDigest(f.backend.fsRoot("sb-release"))).toEqual(before);
    f.oci.close();
  });

  it("removes the snapshot with the sandbox and expires paused sandboxes past the retention", async () => {
    const clock = new ManualClock(new Date("2026-03-01T00:00:00Z"));
    const f = makeFixture(env.root, env.registry.url, { clock, retentionDays: 2 });
    await seeded(f, "sb-old", 1);
    await seeded(f, "sb-gone", 1);
    const old = await f.snapshotter.pause("sb-old");
    const gone = await f.snapshotter.pause("sb-gone");
    await f.snapshotter.remove("sb-gone");
    expect(await f.oci.headManifest("sbx-snapshots", gone.snapshot!.tag)).toBeUndefined();
    expect(await f.store.get("sb-gone")).toBeUndefined();
    await clock.advance(2 * 86_400_000 - 1000);
    expect(await f.snapshotter.expire()).toEqual([]);
    await clock.advance(2000);
    expect(await f.snapshotter.expire()).toEqual(["sb-old"]);
    expect(await f.oci.headManifest("sbx-snapshots", old.snapshot!.tag)).toBeUndefined();
    expect(await f.backend.describe("sb-old")).toBeUndefined();
    f.oci.close();
  });

  it("a delete during a pause stops the pause instead of waiting for it, and leaves nothing", async () => {
    const f = makeFixture(env.root, env.registry.url);
    await seeded(f, "sb-kill-pausing", 64);
    let removal: Promise<void> | undefined;
    const pausing = f.snapshotter.pause("sb-kill-pausing", {
      // the first bytes are on their way to the registry: the sandbox is killed now
      onProgress: () =>
        (removal ??= f.snapshotter.removeWith("sb-kill-pausing", () => f.backend.delete("sb-kill-pausing"))),
    });
    await expect(pausing).rejects.toThrow(/sandbox sb-kill-pausing is being deleted; its pause or resume was stopped/);
    await removal;
    expect(await f.store.get("sb-kill-pausing")).toBeUndefined();
    expect(await f.backend.hasCompute("sb-kill-pausing")).toBe(false);
    expect(await f.oci.headManifest("sbx-snapshots", snapshotTag("sb-kill-pausing", 1))).toBeUndefined();
    f.oci.close();
  });

  it("a delete during a resume stops the resume, and deletes the snapshot and the record", async () => {
    const f = makeFixture(env.root, env.registry.url);
    await seeded(f, "sb-kill-resuming", 64);
    const paused = await f.snapshotter.pause("sb-kill-resuming");
    let removal: Promise<void> | undefined;
    const resuming = f.snapshotter.resume("sb-kill-resuming", {
      onProgress: () =>
        (removal ??= f.snapshotter.removeWith("sb-kill-resuming", () => f.backend.delete("sb-kill-resuming"))),
    });
    await expect(resuming).rejects.toThrow(/being deleted; its pause or resume was stopped/);
    await removal;
    expect(await f.store.get("sb-kill-resuming")).toBeUndefined();
    expect(await f.backend.hasCompute("sb-kill-resuming")).toBe(false);
    expect(await f.oci.headManifest("sbx-snapshots", paused.snapshot!.tag)).toBeUndefined();
    f.oci.close();
  });
});

describe("Snapshotter: effect failures it cannot act on are logged with the sandbox id", () => {
  it("a failed pause whose manifest cannot be deleted logs the orphaned manifest, and the sandbox keeps running", async () => {
    const { logger, lines } = captureLogger();
    const f = makeFixture(env.root, env.registry.url, {
      logger,
      onStep: (_id, step) => {
        if (step === "manifest-put") throw new Error("the registry went away after the manifest");
      },
    });
    await seeded(f, "sb-orphan", 1);
    const deleteManifest = f.oci.deleteManifest.bind(f.oci);
    f.oci.deleteManifest = async () => {
      throw new Error("405 Method Not Allowed: deletes are disabled");
    };
    await expect(f.snapshotter.pause("sb-orphan")).rejects.toThrow("the registry went away after the manifest");
    expect((await f.store.get("sb-orphan"))!.state).toBe("running");
    expect(await f.backend.hasCompute("sb-orphan")).toBe(true);
    const tag = snapshotTag("sb-orphan", 1);
    expect(await f.oci.headManifest("sbx-snapshots", tag)).toBeDefined(); // the orphan the log line is about
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: LEVEL.warn,
        sandbox: "sb-orphan",
        owner: "alice",
        op: "pause",
        tag,
        msg: expect.stringContaining("stays in the registry as an orphan"),
      }),
    );
    f.oci.deleteManifest = deleteManifest;
    f.oci.close();
  });
});

describe("Snapshotter crash safety: the process dies right after each durable step", () => {
  async function crashAt(op: "pause" | "resume", id: string, step: string): Promise<number | null> {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", join(__dirname, "crash-child.ts"), env.root, env.registry.url, op, id, step],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const [code, signal] = await new Promise<[number | null, string | null]>((r) =>
      child.on("exit", (c, s) => r([c, s])),
    );
    if (signal !== "SIGKILL")
      throw new Error(`crash child for ${op}@${step} was not killed at the step (exit ${code}): ${stderr}`);
    return code;
  }

  const pauseSteps: PauseStep[] = [
    "pausing-recorded",
    "pre-pause-hook",
    "layer-pushed",
    "manifest-put",
    "paused-recorded",
    "compute-released",
  ];
  it.each(pauseSteps)(
    "pause killed after %s: after recovery the data is running or in a verified snapshot",
    async (step) => {
      const f = makeFixture(env.root, env.registry.url);
      const id = `sb-crash-${step}`;
      const before = await seeded(f, id, 2);
      await crashAt("pause", id, step);
      await f.snapshotter.recover();
      const rec = (await f.store.get(id))!;
      const compute = await f.backend.hasCompute(id);
      // never neither: running with compute, or paused with a verified snapshot and no compute
      if (rec.state === "running") {
        expect(compute).toBe(true);
        expect(await treeDigest(f.backend.fsRoot(id))).toEqual(before);
      } else {
        expect(rec.state).toBe("paused");
        expect(compute).toBe(false);
        expect((await f.oci.headManifest("sbx-snapshots", rec.snapshot!.tag))?.digest).toBe(rec.snapshot!.digest);
      }
      expect(rec.state).toBe(["paused-recorded", "compute-released"].includes(step) ? "paused" : "running");
      // and the sandbox can go on: pause (idempotent) and resume bring back exactly the data
      await f.snapshotter.pause(id);
      await f.snapshotter.resume(id);
      expect(await treeDigest(f.backend.fsRoot(id))).toEqual(before);
      f.oci.close();
    },
  );

  const resumeSteps: ResumeStep[] = [
    "resuming-recorded",
    "slot-acquired",
    "layer-restored",
    "post-resume-hook",
    "running-recorded",
  ];
  it.each(resumeSteps)("resume killed after %s: after recovery the data is intact and resumable", async (step) => {
    const f = makeFixture(env.root, env.registry.url);
    const id = `sb-rcrash-${step}`;
    const before = await seeded(f, id, 2);
    await f.snapshotter.pause(id);
    await crashAt("resume", id, step);
    await f.snapshotter.recover();
    const rec = (await f.store.get(id))!;
    if (step === "running-recorded") {
      expect(rec.state).toBe("running");
      expect(await f.backend.hasCompute(id)).toBe(true);
    } else {
      expect(rec.state).toBe("paused");
      expect(await f.backend.hasCompute(id)).toBe(false);
      expect((await f.oci.headManifest("sbx-snapshots", rec.snapshot!.tag))?.digest).toBe(rec.snapshot!.digest);
    }
    await f.snapshotter.resume(id);
    expect(await treeDigest(f.backend.fsRoot(id))).toEqual(before);
    f.oci.close();
  });
});
