// One garbage collection of the embedded docker-registry (runtime/local/registry.ts), run by
// SnapshotGc (runtime/snapshot/gc.ts) with no push in flight. `garbage-collect
// --delete-untagged` removes the manifests no tag points at and every blob no remaining
// manifest references. It leaves two kinds of litter that grow with every pause, so they are
// removed here too, which is safe only because no push runs:
// - uploads never committed (a push cut off, a crash mid-pause) under `_uploads`;
// - per-repository links to blobs the collection removed (`_layers/sha256/<digest>`), and
//   the directories of deleted manifests and tags, and emptied blob directories, a few KiB each.
// The registry serves on meanwhile. It keeps no blob cache (registry.ts writes no
// `storage.cache`), so nothing in it can claim a removed blob still exists and no restart is
// needed.
import { spawn } from "node:child_process";
import type { Stats } from "node:fs";
import { existsSync, readdirSync } from "node:fs";
import { lstat, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { CollectionReport } from "../snapshot/gc.ts";

export interface CollectableRegistry {
  binary: string;
  configPath: string;
  /** the filesystem storage root (config storage.filesystem.rootdirectory) */
  storageDir: string;
}

/** Bytes allocated on disk under dir (what `du` counts). */
export async function diskUsage(dir: string): Promise<number> {
  let st: Stats;
  try {
    st = await lstat(dir);
  } catch {
    return 0; // removed meanwhile, or never created (nothing pushed yet)
  }
  let total = st.blocks * 512;
  if (st.isDirectory()) {
    for (const name of await readdir(dir).catch(() => [])) total += await diskUsage(join(dir, name));
  }
  return total;
}

export async function collectRegistryGarbage(
  reg: CollectableRegistry,
  opts: { timeoutMs?: number } = {},
): Promise<CollectionReport> {
  const repos = join(reg.storageDir, "docker", "registry", "v2", "repositories");
  const blobs = join(reg.storageDir, "docker", "registry", "v2", "blobs", "sha256");
  // nothing was ever pushed (a fresh state dir): the registry's collector fails on the missing
  // repositories folder instead of finding nothing, and there is nothing to collect anyway
  if (!existsSync(repos)) return { reclaimedBytes: 0, detail: "nothing pushed yet" };
  const before = await diskUsage(reg.storageDir);
  const summary = await runGarbageCollect(reg, opts.timeoutMs ?? 10 * 60_000);
  let swept = await sweepRepositories(repos, blobs);
  // the collector leaves the emptied two-hex-digit directories blobs are filed under
  swept += await removeChildren(blobs, (prefix) => readdirSync(join(blobs, prefix)).length === 0);
  const after = await diskUsage(reg.storageDir);
  return {
    reclaimedBytes: before - after,
    detail: `${summary}, ${swept} stale links, uploads and directories removed`,
  };
}

/** Runs the registry's own collector; resolves with its summary ("N blobs and M manifests eligible for deletion"). */
function runGarbageCollect(reg: CollectableRegistry, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(reg.binary, ["garbage-collect", "--delete-untagged", reg.configPath], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let summary = "nothing eligible for deletion";
    let partial = "";
    let tail = "";
    // it prints a line per manifest and blob it marks or deletes: keep the summary and a tail
    const take = (c: Buffer) => {
      const lines = (partial + c.toString()).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) {
        const m = /(\d+) blobs and (\d+) manifests eligible for deletion/.exec(line);
        if (m) summary = `${m[1]} blobs and ${m[2]} manifests deleted`;
      }
      tail = (tail + c.toString()).slice(-4000);
    };
    p.stdout.on("data", take);
    p.stderr.on("data", take);
    const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    p.on("error", (err) => {
      clearTimeout(timer);
      reject(
        new Error(
          `snapshot registry garbage collection: ${reg.binary} could not start: ${err.message}; install docker-registry`,
        ),
      );
    });
    p.on("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve(summary);
      reject(
        new Error(
          `snapshot registry garbage collection: ${reg.binary} garbage-collect exited ${code ?? signal}${signal ? ` (killed after ${timeoutMs} ms)` : ""}: ${tail.trim()}`,
        ),
      );
    });
  });
}

/** Repository litter the collector leaves (see the file comment). Returns how many entries went. */
async function sweepRepositories(dir: string, blobs: string): Promise<number> {
  let removed = 0;
  for (const name of await readdir(dir)) {
    const path = join(dir, name);
    if (name === "_uploads") removed += await removeChildren(path, () => true);
    else if (name === "_layers")
      removed += await removeChildren(
        join(path, "sha256"),
        (digest) => !existsSync(join(blobs, digest.slice(0, 2), digest)),
      );
    else if (name === "_manifests") {
      removed += await removeChildren(
        join(path, "revisions", "sha256"),
        (digest) => !existsSync(join(path, "revisions", "sha256", digest, "link")),
      );
      removed += await removeChildren(
        join(path, "tags"),
        (tag) => !existsSync(join(path, "tags", tag, "current", "link")),
      );
    } else if ((await lstat(path)).isDirectory()) removed += await sweepRepositories(path, blobs); // a nested repository name
  }
  return removed;
}

async function removeChildren(dir: string, shouldRemove: (name: string) => boolean): Promise<number> {
  let removed = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!shouldRemove(name)) continue;
    await rm(join(dir, name), { recursive: true, force: true });
    removed++;
  }
  return removed;
}
