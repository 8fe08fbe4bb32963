// Local backend benchmark: create->ready, exec round trip next to a bare host spawn measured in
// the same run, warm claim, and N concurrent sandboxes. Prints JSON, then a short table.
//   npx tsx bench/local.ts [--samples 100] [--concurrent 200]
// Needs root (cgroups, bubblewrap). Asserts nothing: tests assert behaviour, this prints numbers.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import type { Backend, SandboxSpec } from "../runtime/core/types.ts";
import { createLocalBackend } from "../runtime/local/backend.ts";
import { detectCgroups } from "../runtime/local/cgroups.ts";
import { cgroupRootName } from "../runtime/local/records.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SAMPLES = arg("samples", 100);
const CONCURRENT = arg("concurrent", 200);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] * 100) / 100;
}
const summary = (xs: number[]) => ({ n: xs.length, p50: pct(xs, 50), p95: pct(xs, 95), max: pct(xs, 100) });

function bareSpawn(): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn("true", [], { stdio: ["ignore", "pipe", "pipe"] });
    c.stdout.resume();
    c.stderr.resume();
    c.on("error", reject);
    c.on("close", () => resolve());
  });
}

/** memory charged to all of this backend's sandboxes (hierarchical: one read of their common parent) */
function sandboxesMemoryMiB(stateDir: string): number {
  const layout = detectCgroups(cgroupRootName(stateDir));
  const file =
    layout.version === 1
      ? path.join(layout.mounts.memory, layout.rootName, "memory.usage_in_bytes")
      : path.join(layout.mounts.unified, layout.rootName, "memory.current");
  return Math.round(Number(fs.readFileSync(file, "utf8")) / 2 ** 20);
}

let seq = 0;
function mkSpec(config: ReturnType<typeof validateRuntimeConfig>): SandboxSpec {
  return {
    id: `bench-${++seq}`,
    owner: "bench",
    image: { profile: "base", image: "host" },
    size: config.sizeClasses.nano,
    env: {},
    ttlSeconds: 3600,
    idleTimeoutSeconds: 0,
    metadata: {},
    createdAt: new Date(),
  };
}

async function execTrue(b: Backend, id: string): Promise<void> {
  const s = await b.exec(id, { command: ["true"] });
  s.stdout.resume();
  s.stderr.resume();
  const r = await s.result;
  if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}`);
}

async function main(): Promise<void> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "sbxb-"));
  const config = validateRuntimeConfig({ local: { stateDir }, warmPool: [] });
  const backend = createLocalBackend(config, { logger: silentLogger(), clock: systemClock });
  await backend.start();
  // other work on the machine moves every number here: the load average is part of the result
  const out: Record<string, unknown> = {
    machine: {
      cpus: os.cpus().length,
      memGiB: Math.round(os.totalmem() / 2 ** 30),
      kernel: os.release(),
      node: process.version,
      loadAvgAtStart: os.loadavg()[0],
    },
  };
  try {
    // warm-up: first spawn/create pay for page cache and JIT
    for (let i = 0; i < 5; i++) await bareSpawn();

    const create: number[] = [];
    const ids: string[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const s = mkSpec(config);
      const t = performance.now();
      await backend.provision(s);
      await backend.awaitReady(s.id, { timeoutMs: 30_000 });
      create.push(performance.now() - t);
      ids.push(s.id);
      if (ids.length > 10) await backend.delete(ids.shift()!);
    }
    out.createToReadyMs = summary(create);

    const id = ids[ids.length - 1];
    for (let i = 0; i < 10; i++) await execTrue(backend, id);
    const bare: number[] = [];
    const exec: number[] = [];
    // interleaved so both see the same machine load
    for (let i = 0; i < SAMPLES * 2; i++) {
      let t = performance.now();
      await bareSpawn();
      bare.push(performance.now() - t);
      t = performance.now();
      await execTrue(backend, id);
      exec.push(performance.now() - t);
    }
    out.bareHostSpawnMs = summary(bare);
    out.execRoundTripMs = summary(exec);
    out.execOverBareP50 = Math.round((pct(exec, 50) / pct(bare, 50)) * 100) / 100;
    for (const x of ids) await backend.delete(x);

    // N sandboxes alive at once: started together, then every one runs a command
    const t0 = performance.now();
    const specs = Array.from({ length: CONCURRENT }, () => mkSpec(config));
    const ready = await Promise.allSettled(
      specs.map(async (s) => {
        await backend.provision(s);
        await backend.awaitReady(s.id, { timeoutMs: 120_000 });
      }),
    );
    const allReadyMs = performance.now() - t0;
    const okIds = specs.filter((_, i) => ready[i].status === "fulfilled").map((s) => s.id);
    const t1 = performance.now();
    const execs = await Promise.allSettled(okIds.map((x) => execTrue(backend, x)));
    const allExecMs = performance.now() - t1;
    const memoryMiB = sandboxesMemoryMiB(stateDir);
    out.concurrent = {
      requested: CONCURRENT,
      ready: okIds.length,
      firstError: ready.find((r) => r.status === "rejected")?.reason?.message,
      allReadyMs: Math.round(allReadyMs),
      execInAllMs: Math.round(allExecMs),
      execOk: execs.filter((r) => r.status === "fulfilled").length,
      execFirstError: (execs.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined)?.reason
        ?.message,
      sandboxesMemoryMiB: memoryMiB,
    };
    const t2 = performance.now();
    await Promise.all(okIds.map((x) => backend.delete(x)));
    (out.concurrent as Record<string, unknown>).deleteAllMs = Math.round(performance.now() - t2);
  } finally {
    await backend.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
  (out.machine as Record<string, unknown>).loadAvgAtEnd = os.loadavg()[0];
  console.log(JSON.stringify(out));
  const c = out.createToReadyMs as ReturnType<typeof summary>;
  const e = out.execRoundTripMs as ReturnType<typeof summary>;
  const b = out.bareHostSpawnMs as ReturnType<typeof summary>;
  const k = out.concurrent as Record<string, unknown>;
  console.log(`
| measure                         | p50      | p95      |
|---------------------------------|----------|----------|
| create -> ready (cold)          | ${c.p50} ms | ${c.p95} ms |
| exec round trip (\`true\`)        | ${e.p50} ms | ${e.p95} ms |
| bare host spawn (\`true\`)        | ${b.p50} ms | ${b.p95} ms |
| exec / bare (p50)               | ${out.execOverBareP50}x | |
| ${k.requested} concurrent: ready ${k.ready}, all ready in ${k.allReadyMs} ms, exec in all in ${k.execInAllMs} ms (${k.execOk} ok), ${k.sandboxesMemoryMiB} MiB charged to their cgroups, delete all ${k.deleteAllMs} ms |`);
}

await main();
