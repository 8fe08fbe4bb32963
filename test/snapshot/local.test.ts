// Pause and resume on the REAL local backend (bubblewrap sandboxes) through the real Manager,
// with snapshots in a real registry.
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { ConflictError } from "../../runtime/core/errors.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import type { Manager } from "../../runtime/core/types.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import type { PauseResume } from "../../runtime/snapshot/service.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

let registry: TestRegistry;
let stateDir: string;
let manager: SandboxManager;
let backend: PauseResume;

async function run(m: Manager, owner: string, id: string, script: string): Promise<string> {
  const s = await m.exec(owner, id, { command: ["sh", "-c", script], timeoutMs: 120_000 });
  let out = "";
  let err = "";
  s.stdout.on("data", (d: Buffer) => (out += d.toString()));
  s.stderr.on("data", (d: Buffer) => (err += d.toString()));
  // stdout may still be draining when result settles
  const [r] = await Promise.all([s.result, once(s.stdout, "end"), once(s.stderr, "end")]);
  if (r.exitCode !== 0) throw new Error(`exec ${script} exited ${r.exitCode}: ${err}`);
  return out;
}

beforeAll(async () => {
  registry = await startRegistry();
  stateDir = mkdtempSync(join(tmpdir(), "sbxs-"));
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
        tmp: "256Mi",
        pids: 128,
      },
    },
    defaults: { size: "nano" },
  });
  const logger = silentLogger();
  const parts = await buildManager(config, {
    logger,
    clock: systemClock,
    platform: createLocalPlatform(config, { logger, clock: systemClock }),
  });
  manager = parts.manager;
  backend = parts.pauseResume!;
  await manager.start({ reaper: false });
});
afterAll(async () => {
  await manager?.close();
  await registry?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

describe("pause/resume on the local backend", () => {
  it("keeps /workspace and /tmp byte for byte (SHA-256) across pause and resume, same id, owner, env and expiry", async () => {
    const sb = await manager.create({
      owner: "alice",
      profile: "base",
      size: "nano",
      env: { GREETING: "kept across pause" },
      ttlSeconds: 1234,
    });
    await manager.wait("alice", sb.id, { timeoutMs: 60_000 });
    const fill =
      "head -c 64000000 /dev/urandom > /workspace/data.bin && mkdir -p /workspace/a/b && echo hi > /workspace/a/b/c.txt && ln -s a/b/c.txt /workspace/link && echo scratch > /tmp/s.txt";
    await run(manager, "alice", sb.id, fill);
    const digest =
      'cd / && find workspace tmp -xdev \\( -type f -o -type l \\) | sort | while read f; do if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else sha256sum "$f"; fi; done';
    const before = await run(manager, "alice", sb.id, digest);
    expect(before).toContain("workspace/data.bin");

    const paused = await manager.pause!("alice", sb.id);
    expect(paused).toMatchObject({ id: sb.id, owner: "alice", phase: "Paused" });
    expect((await manager.get("alice", sb.id)).phase).toBe("Paused");
    const rec = await backend.snapshotter.status(sb.id);
    expect(rec).toMatchObject({ state: "paused", computeReleased: true });
    expect(rec!.snapshot!.sizeBytes).toBeGreaterThan(64_000_000);

    const resumed = await manager.resume!("alice", sb.id);
    expect(resumed).toMatchObject({
      id: sb.id,
      owner: "alice",
      phase: "Running",
      ready: true,
      createdAt: sb.createdAt,
      expiresAt: sb.expiresAt,
    });
    expect(await run(manager, "alice", sb.id, digest)).toBe(before);
    expect(await run(manager, "alice", sb.id, 'printf %s "$GREETING"')).toBe("kept across pause");
    await manager.kill("alice", sb.id);
    expect(await backend.snapshotter.status(sb.id)).toBeUndefined();
  });

  it("exec on a paused sandbox resumes it first; without auto-resume it is a 409", async () => {
    const sb = await manager.create({ owner: "alice", profile: "base", size: "nano" });
    await manager.wait("alice", sb.id, { timeoutMs: 60_000 });
    await run(manager, "alice", sb.id, "echo marker-91c2 > /workspace/m");
    await manager.pause!("alice", sb.id);
    expect(await run(manager, "alice", sb.id, "cat /workspace/m")).toBe("marker-91c2\n");
    expect((await manager.get("alice", sb.id)).phase).toBe("Running");

    const off = await manager.create({
      owner: "alice",
      profile: "base",
      size: "nano",
      metadata: { "sbx.auto-resume": "false" },
    });
    await manager.wait("alice", off.id, { timeoutMs: 60_000 });
    await manager.pause!("alice", off.id);
    const err = await manager.exec("alice", off.id, { command: ["true"] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as Error).message).toMatch(
      new RegExp(`^exec: sandbox ${off.id} is paused and does not allow auto-resume: resume it first`),
    );
    await manager.kill("alice", sb.id);
    await manager.kill("alice", off.id);
  });
});
