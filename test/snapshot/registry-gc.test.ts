// Snapshots give their disk back (issue 10 item 8): the REAL local backend, the real Manager and
// a real docker-registry, with the registry garbage collection the embedded registry runs
// (runtime/snapshot/gc.ts + runtime/local/registryGc.ts). Registry storage is measured with du:
// after each resume and after the delete it is back at its baseline; while paused it holds the
// live snapshot only, and that snapshot survives every collection (its files come back). A
// collection asked for during a pause waits for the push, and the pause stays good.
import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { collectRegistryGarbage } from "../../runtime/local/registryGc.ts";
import { SnapshotGc } from "../../runtime/snapshot/gc.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

const MB = 1024 * 1024;
/** slack for directory blocks; the litter a collection alone leaves grows ~40 KiB per cycle */
const TOLERANCE = 16 * 1024;
let registry: TestRegistry;
let stateDir: string;
let manager: SandboxManager;
let gc: SnapshotGc;
/** pushes in flight at the start of each collection: must always be 0 */
const inFlightAtCollection: number[] = [];

/** Allocated bytes under the registry's storage root, as du counts them. */
function du(): number {
  if (!existsSync(registry.storageDir)) return 0;
  return Number(execFileSync("du", ["-s", "--block-size=1", registry.storageDir], { encoding: "utf8" }).split("\t")[0]);
}

async function sh(id: string, script: string): Promise<string> {
  const s = await manager.exec("alice", id, { command: ["sh", "-c", script], timeoutMs: 120_000 });
  let out = "";
  let err = "";
  s.stdout.on("data", (d: Buffer) => (out += d.toString()));
  s.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const [r] = await Promise.all([s.result, once(s.stdout, "end"), once(s.stderr, "end")]);
  if (r.exitCode !== 0) throw new Error(`exec ${script} exited ${r.exitCode}: ${err}`);
  return out;
}

/** Storage once every scheduled collection ran and `ok` holds (the delete after a resume runs in the background). */
async function settled(what: string, ok: (bytes: number) => boolean): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    await gc.idle();
    const bytes = du();
    if (ok(bytes)) return bytes;
    if (Date.now() - t0 > 60_000) throw new Error(`${what}: registry storage ${bytes} bytes after 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  registry = await startRegistry();
  stateDir = mkdtempSync(join(tmpdir(), "sbxgc-"));
  const config = validateRuntimeConfig({
    local: { stateDir },
    snapshots: { registry: registry.url },
    sizeClasses: {
      nano: {
        cpuRequest: "100m",
        cpuLimit: "1",
        memoryRequest: "64Mi",
        memoryLimit: "512Mi",
        workspace: "1Gi",
        tmp: "64Mi",
        pids: 128,
      },
    },
    defaults: { size: "nano" },
  });
  const logger = silentLogger();
  const collect = () => {
    inFlightAtCollection.push(gc.gate.inFlight);
    return collectRegistryGarbage(registry);
  };
  gc = new SnapshotGc({ collect, logger, clock: systemClock, delayMs: 0 });
  const parts = await buildManager(config, {
    logger,
    clock: systemClock,
    platform: createLocalPlatform(config, { logger, clock: systemClock }),
    snapshotGc: gc,
  });
  manager = parts.manager;
  await manager.start({ reaper: false });
}, 60_000);

afterAll(async () => {
  await gc?.close();
  await manager?.close();
  await registry?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

async function running(): Promise<string> {
  const sb = await manager.create({ owner: "alice", profile: "base", size: "nano" });
  await manager.wait("alice", sb.id, { timeoutMs: 60_000 });
  return sb.id;
}

describe("snapshot registry garbage collection", () => {
  it("storage returns to its baseline after pause/resume cycles and a delete; a live snapshot survives every collection", async () => {
    // baseline: the repository's skeleton exists once anything was pushed and collected
    const warm = await running();
    await manager.pause!("alice", warm);
    await manager.kill("alice", warm);
    const baseline = await settled("baseline", () => true);
    expect(baseline).toBeLessThan(1 * MB);

    const id = await running();
    for (let cycle = 1; cycle <= 3; cycle++) {
      const sum = await sh(id, "head -c 33554432 /dev/urandom > /workspace/data && sha256sum /workspace/data");
      await manager.pause!("alice", id);
      // paused: the live snapshot (32 MiB of new data) and nothing of the cycles before it
      const paused = await settled(`cycle ${cycle} paused`, (b) => b <= baseline + 32 * MB + 2 * MB);
      expect(paused, `cycle ${cycle}: the live snapshot is stored`).toBeGreaterThan(baseline + 32 * MB);
      // the collection kept it whole: the files come back (the /tmp layer, the same blob every
      // cycle, was collected after the last resume and pushed again: the registry must not
      // believe it still has it)
      await manager.resume!("alice", id);
      expect(await sh(id, "sha256sum /workspace/data")).toBe(sum);
      await settled(`cycle ${cycle} resumed`, (b) => b <= baseline + TOLERANCE);
    }
    await manager.pause!("alice", id);
    expect(du()).toBeGreaterThan(baseline + 32 * MB);
    await manager.kill("alice", id);
    const after = await settled("after the delete", (b) => b <= baseline + TOLERANCE);
    expect(after - baseline).toBeLessThanOrEqual(TOLERANCE);
  }, 300_000);

  it("a collection asked for during a pause waits for its push; the snapshot is intact", async () => {
    const id = await running();
    const sum = await sh(id, "head -c 33554432 /dev/urandom > /workspace/data && sha256sum /workspace/data");
    const pause = manager.pause!("alice", id);
    const t0 = Date.now();
    while (gc.gate.inFlight === 0) {
      if (Date.now() - t0 > 60_000) throw new Error("the pause's push never started");
      await new Promise((r) => setTimeout(r, 5));
    }
    const before = inFlightAtCollection.length;
    await Promise.all([pause, gc.collectNow()]);
    expect(inFlightAtCollection.length).toBeGreaterThan(before);
    expect(inFlightAtCollection, "no collection ever started with a push in flight").toEqual(
      inFlightAtCollection.map(() => 0),
    );
    await manager.resume!("alice", id);
    expect(await sh(id, "sha256sum /workspace/data")).toBe(sum);
    await manager.kill("alice", id);
  }, 300_000);
});

it("a collection of a registry nothing was ever pushed to succeeds (npm start collects at start)", async () => {
  const empty = await startRegistry();
  try {
    const report = await collectRegistryGarbage(empty);
    expect(report.reclaimedBytes).toBe(0);
  } finally {
    await empty.stop();
  }
});
