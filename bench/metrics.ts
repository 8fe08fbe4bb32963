// The resource sampler's cost (issue 32 item 4): CPU time of this process per sandbox per minute of
// sampling, measured with process.cpuUsage around N ticks over --sandboxes real local sandboxes,
// against two baselines in the same run: the same ticks with a reader that reads nothing (the
// sampler's own bookkeeping), and idle (the process with the sandboxes up, not sampling).
// Prints JSON, then a short table.
//   npx tsx bench/metrics.ts [--sandboxes 50] [--ticks 60] [--interval-ms 5000]
// Needs root (cgroups, bubblewrap). Local platform only: the test cluster's 1,000 sandboxes are
// kwok pods, which run nothing and have no command channel to read through.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { ManualClock, systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { ResourceSampler } from "../runtime/core/resourceSampler.ts";
import type { ResourceReading, SandboxSpec } from "../runtime/core/types.ts";
import { createLocalBackend } from "../runtime/local/backend.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SANDBOXES = arg("sandboxes", 50);
const TICKS = arg("ticks", 60);
const INTERVAL_MS = arg("interval-ms", 5000);

/** CPU ms (user + system) of this process while `fn` runs. */
async function cpuMsOf(fn: () => Promise<void>): Promise<number> {
  const before = process.cpuUsage();
  await fn();
  const d = process.cpuUsage(before);
  return (d.user + d.system) / 1000;
}

async function ticks(read: () => Promise<ResourceReading[]>): Promise<{ cpuMs: number; read: number }> {
  const clock = new ManualClock(Date.now());
  const sampler = new ResourceSampler({
    read,
    clock,
    logger: silentLogger(),
    intervalMs: INTERVAL_MS,
    historySeconds: 3600,
    memoryWarnFraction: 0.9,
  });
  const cpuMs = await cpuMsOf(async () => {
    for (let i = 0; i < TICKS; i++) {
      await sampler.tick();
      await clock.advance(INTERVAL_MS);
    }
  });
  return { cpuMs, read: sampler.trackedCount };
}

async function main(): Promise<void> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "sbxm-"));
  const config = validateRuntimeConfig({ local: { stateDir }, budget: { cpu: "1000", memory: "1000Gi" } });
  const backend = createLocalBackend(config, { logger: silentLogger(), clock: systemClock });
  await backend.start();
  try {
    const specs: SandboxSpec[] = Array.from({ length: SANDBOXES }, (_, i) => ({
      id: `m${process.pid}-${i}`,
      owner: `owner-${i % 5}`,
      image: { profile: "base", image: "host" },
      size: config.sizeClasses.nano,
      env: {},
      ttlSeconds: 3600,
      idleTimeoutSeconds: 0,
      metadata: {},
      createdAt: new Date(),
    }));
    for (let i = 0; i < specs.length; i += 8) {
      const batch = specs.slice(i, i + 8);
      await Promise.all(batch.map((s) => backend.provision(s)));
      await Promise.all(batch.map((s) => backend.awaitReady(s.id, { timeoutMs: 120_000 })));
    }
    const cgroup = await ticks(() => backend.readResources!());
    const empty = await ticks(async () => []);
    const idleMs = TICKS * 20; // idle for as long as a tick of 20 ms would take, scaled below
    const idle = await cpuMsOf(() => new Promise((r) => setTimeout(r, idleMs)));
    // CPU ms per sandbox per minute at the interval: ticks per minute x ms per tick / sandboxes
    const perMinute = (cpuMs: number) => (cpuMs / TICKS) * (60_000 / INTERVAL_MS);
    const result = {
      bench: "metrics-sampler",
      platform: "local",
      cgroupVersion: fs.existsSync("/sys/fs/cgroup/cgroup.controllers") ? 2 : 1,
      sandboxes: SANDBOXES,
      ticks: TICKS,
      intervalMs: INTERVAL_MS,
      sampledPerTick: cgroup.read,
      cpuMsPerTick: +(cgroup.cpuMs / TICKS).toFixed(3),
      cpuMsPerSandboxPerMinute: +(perMinute(cgroup.cpuMs) / SANDBOXES).toFixed(4),
      baselineEmptyReaderCpuMsPerTick: +(empty.cpuMs / TICKS).toFixed(3),
      baselineIdleCpuMsPerSecond: +((idle * 1000) / idleMs).toFixed(3),
      loadavg: os.loadavg().map((x) => +x.toFixed(2)),
    };
    console.log(JSON.stringify(result));
    console.log(
      [
        "what                                   value",
        `sandboxes sampled per tick             ${result.sampledPerTick}/${SANDBOXES}`,
        `CPU per tick (all sandboxes)           ${result.cpuMsPerTick} ms`,
        `CPU per sandbox per minute (@${INTERVAL_MS / 1000}s)   ${result.cpuMsPerSandboxPerMinute} ms`,
        `baseline: tick reading nothing         ${result.baselineEmptyReaderCpuMsPerTick} ms`,
        `baseline: idle process                 ${result.baselineIdleCpuMsPerSecond} ms/s`,
      ].join("\n"),
    );
  } finally {
    await backend.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
}

await main();
