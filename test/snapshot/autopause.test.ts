// Probe-driven pause and scheduled wake end to end: real probe commands in a sandbox, real
// snapshots in a real registry, time from a ManualClock (no sleeping).
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { expect, it } from "vitest";
import { AutoPauseController, FileStatusStore } from "../../runtime/autopause/controller.ts";
import { validateAutoPause } from "../../runtime/autopause/spec.ts";
import { ManualClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { Sandbox } from "../../runtime/core/types.ts";
import { pauseCaller } from "../support/pause.ts";
import { snapshotTestEnv } from "./env.ts";
import { makeFixture, makeSpec } from "./fixture.ts";

const env = snapshotTestEnv("sbx-autop-");

it("pauses after the idle probe reports inactive for the threshold, and wakes leadTime before the probed task", async () => {
  const clock = new ManualClock(new Date("2026-01-01T00:00:00Z"));
  const f = makeFixture(env.root, env.registry.url, { clock });
  const backend = pauseCaller(f.backend, f.snapshotter);
  const spec = makeSpec("sb-auto");
  f.specs.set(spec.id, spec);
  await backend.provision(spec);
  const ws = join(f.backend.fsRoot(spec.id), "workspace");
  await writeFile(join(ws, "state"), "active\n");
  await writeFile(join(ws, "next"), "none\n");
  const policy = validateAutoPause({
    probes: [
      { name: "Active", command: ["sh", "-c", 'cat "$SBX_FS/workspace/state"'], periodSeconds: 10, timeoutSeconds: 5 },
      { name: "Cron", command: ["sh", "-c", 'cat "$SBX_FS/workspace/next"'], periodSeconds: 10, timeoutSeconds: 5 },
    ],
    pause: { whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: "1m" } },
    resume: { whenProbedSchedule: { probe: "Cron", timeFormat: "unix", leadTime: "5m" } },
  });
  const ctl = new AutoPauseController({
    clock,
    logger: silentLogger(),
    probeBackend: f.backend,
    targets: async () => [{ sandbox: (await backend.describe(spec.id))!, policy }],
    pause: (id) => backend.pause(id),
    resume: (id) => backend.resume(id),
    kill: (id) => backend.delete(id),
  });
  const phase = async () => (await backend.describe(spec.id))!.phase;

  await ctl.tick();
  let st = (await ctl.store.get(spec.id))!;
  expect(st.probes.Active).toMatchObject({ ok: true, message: "active" });
  expect(st.nextPauseTime).toBeUndefined();

  // idle from t=10s; a task one hour out (unix seconds)
  await writeFile(join(ws, "state"), "inactive\n");
  const task = new Date("2026-01-01T01:00:00Z");
  await writeFile(join(ws, "next"), `${task.getTime() / 1000}\n`);
  await clock.advance(10_000);
  await ctl.tick();
  st = (await ctl.store.get(spec.id))!;
  expect(st.nextPauseTime).toBe("2026-01-01T00:01:10.000Z");
  expect(st.nextResumeTime).toBe("2026-01-01T00:55:00.000Z");

  // reporting active clears the prediction; inactive again restarts the threshold
  await writeFile(join(ws, "state"), "active\n");
  await clock.advance(10_000);
  await ctl.tick();
  expect((await ctl.store.get(spec.id))!.nextPauseTime).toBeUndefined();
  await writeFile(join(ws, "state"), "inactive\n");
  await clock.advance(10_000);
  await ctl.tick();
  expect((await ctl.store.get(spec.id))!.nextPauseTime).toBe("2026-01-01T00:01:30.000Z");

  for (let i = 0; i < 5; i++) {
    await clock.advance(10_000);
    await ctl.tick();
    expect(await phase()).toBe("Running");
  }
  await clock.advance(10_000); // 00:01:30
  await ctl.tick();
  expect(await phase()).toBe("Paused");
  expect(await f.backend.hasCompute(spec.id)).toBe(false);
  expect((await ctl.store.get(spec.id))!.nextResumeTime).toBe("2026-01-01T00:55:00.000Z");

  await clock.advance(53 * 60_000 + 20_000); // 00:54:50
  await ctl.tick();
  expect(await phase()).toBe("Paused");
  await clock.advance(10_000); // 00:55:00
  await ctl.tick();
  expect(await phase()).toBe("Running");
  expect(await readFile(join(ws, "state"), "utf8")).toBe("inactive\n");
  // woken for the task: the idle rule waits until the task time has passed
  await clock.advance(60_000);
  await ctl.tick();
  await clock.advance(60_000);
  await ctl.tick();
  expect(await phase()).toBe("Running");
  expect((await ctl.store.get(spec.id))!.lastAction).toMatchObject({ action: "resume", reason: "probedSchedule" });
  f.oci.close();
});

it("a failing or timed-out idle probe keeps the sandbox running", async () => {
  const clock = new ManualClock(new Date("2026-01-01T00:00:00Z"));
  const f = makeFixture(env.root, env.registry.url, { clock });
  const backend = pauseCaller(f.backend, f.snapshotter);
  const spec = makeSpec("sb-fail");
  f.specs.set(spec.id, spec);
  await backend.provision(spec);
  const policy = validateAutoPause({
    probes: [
      { name: "Active", command: ["sh", "-c", "echo inactive; exit 1"], periodSeconds: 1, timeoutSeconds: 1 },
      { name: "Slow", command: ["sh", "-c", "echo inactive; exec sleep 5"], periodSeconds: 1, timeoutSeconds: 1 },
    ],
    pause: { whenProbedIdle: { probe: "Active", messageRegex: "inactive", thresholdDuration: 0 } },
  });
  const slowPolicy = { ...policy, idle: { ...policy.idle!, probe: "Slow" } };
  for (const p of [policy, slowPolicy]) {
    const ctl = new AutoPauseController({
      clock,
      logger: silentLogger(),
      probeBackend: f.backend,
      targets: async () => [{ sandbox: (await backend.describe(spec.id))!, policy: p }],
      pause: (id) => backend.pause(id),
      resume: (id) => backend.resume(id),
      kill: (id) => backend.delete(id),
    });
    await ctl.tick();
    await clock.advance(60_000);
    await ctl.tick();
    const st = (await ctl.store.get(spec.id))!;
    expect((await backend.describe(spec.id))!.phase).toBe("Running");
    expect(st.probes[p.idle!.probe]).toMatchObject({ ok: false, message: "inactive", timedOut: p === slowPolicy });
    expect(st.nextPauseTime).toBeUndefined();
  }
  f.oci.close();
});

it("a restarted controller wakes a paused sandbox from the recorded nextResumeTime (file status store)", async () => {
  const clock = new ManualClock(new Date("2026-01-01T00:00:00Z"));
  const store = new FileStatusStore(join(env.root, "autopause"));
  const policy = validateAutoPause({
    probes: [{ name: "Cron", command: ["true"] }],
    resume: { whenProbedSchedule: { probe: "Cron", leadTime: 0 } },
  });
  const sandbox: Sandbox = {
    id: "sb-restart",
    owner: "alice",
    profile: "base",
    size: "nano",
    phase: "Paused",
    ready: false,
    createdAt: "2026-01-01T00:00:00Z",
    expiresAt: "2026-01-02T00:00:00Z",
    metadata: {},
    cpuRequestMillis: 0,
    memoryRequestBytes: 0,
  };
  await store.put("sb-restart", { probes: {}, nextResumeTime: "2026-01-01T01:00:00.000Z" });
  const resumed: string[] = [];
  const ctl = new AutoPauseController({
    clock,
    logger: silentLogger(),
    probeBackend: { exec: async () => Promise.reject(new Error("a paused sandbox is never probed")) },
    targets: async () => [{ sandbox, policy }],
    pause: async () => undefined,
    resume: async (id) => resumed.push(id),
    kill: async () => undefined,
    store,
  });
  await clock.advance(59 * 60_000);
  await ctl.tick();
  expect(resumed).toEqual([]);
  await clock.advance(60_000);
  await ctl.tick();
  expect(resumed).toEqual(["sb-restart"]);
  expect(await store.get("sb-restart")).toMatchObject({
    probes: {},
    resumedAt: "2026-01-01T01:00:00.000Z",
    lastAction: { action: "resume", reason: "probedSchedule" },
  });
});
