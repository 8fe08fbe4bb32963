// CLI start-up cost, measured against a bare Node start in the same run: `node -e 0`, the
// prebuilt CLI (`--help`, `sbx ls` through the PATH against a live local service, and against a
// port where nothing listens), the TypeScript-through-tsx path it replaced, `npx sbx ls` and
// `npm run sbx -- ls`, plus the first call after an edit (a rebuild). Commands are interleaved
// round by round, so machine load moves them all alike. Prints JSON, then a short table.
//   npx tsx bench/cli-startup.ts [--samples 30]
// Needs root (the local service runs real sandboxes). Asserts nothing: tests assert behaviour.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { HttpManager } from "../runtime/client/http.ts";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { freePort } from "../runtime/core/ports.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createLocalPlatform } from "../runtime/local/platform.ts";
import { startService } from "../runtime/server/service.ts";
import { nearestRank } from "./lib/percentile.ts";

const repo = resolve(import.meta.dirname, "..");
const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SAMPLES = arg("samples", 30);
const WARMUP = 2;
const REBUILDS = 3;
const TOKEN = "sbx_bench_cli_startup_0123456789";

interface Case {
  label: string;
  command: string;
  args: string[];
  env?: Record<string, string>;
  /** the exit code that means it worked (an unreachable server is expected to fail) */
  expect: number;
}

/** wall time from spawn to exit, output drained; rejects on an unexpected exit code */
function timeOnce(c: Case, baseEnv: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((done, fail) => {
    const t0 = performance.now();
    const child = spawn(c.command, c.args, {
      cwd: repo,
      env: { ...baseEnv, ...c.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stdout.resume();
    child.stderr.on("data", (d) => (stderr += d));
    child.stdout.on("error", fail);
    child.stderr.on("error", fail);
    child.on("error", fail);
    child.on("close", (code) => {
      const ms = performance.now() - t0;
      if (code === c.expect) done(ms);
      else fail(new Error(`${c.label}: exit ${code}, expected ${c.expect}: ${stderr.trim().slice(-500)}`));
    });
  });
}

const stats = (xs: number[]) => ({
  n: xs.length,
  p50: round(nearestRank(xs, 50)!),
  p95: round(nearestRank(xs, 95)!),
  min: round(Math.min(...xs)),
  max: round(Math.max(...xs)),
});
const round = (x: number) => Math.round(x * 10) / 10;

async function main(): Promise<void> {
  const stateDir = mkdtempSync(join(os.tmpdir(), "sbx-bench-cli-"));
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 }, warmPool: [] });
  const logger = silentLogger();
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), "bench"]]));
  const service = await startService({
    config,
    tokens,
    logger,
    clock: systemClock,
    platform: createLocalPlatform(config, { logger, clock: systemClock }),
    port: 0,
  });
  const loadAvgAtStart = os.loadavg()[0];
  try {
    // one sandbox, so `ls` has a row to print
    const client = new HttpManager({ server: service.url, token: TOKEN });
    const sandbox = await client.create({ owner: "bench", profile: "base", size: "nano" });
    await client.wait("", sandbox.id, { timeoutMs: 60_000 });

    const live = { SBX_SERVER: service.url, SBX_TOKEN: TOKEN };
    // a port nothing listens on: connection refused, so this is start-up plus a failed connect
    const nobody = { SBX_SERVER: `http://127.0.0.1:${await freePort()}`, SBX_TOKEN: TOKEN };
    const cases: Case[] = [
      { label: "node -e 0", command: process.execPath, args: ["-e", "0"], expect: 0 },
      { label: "node bin/sbx.mjs --help", command: process.execPath, args: ["bin/sbx.mjs", "--help"], expect: 0 },
      { label: "sbx ls (PATH)", command: "sbx", args: ["ls"], env: live, expect: 0 },
      { label: "sbx ls, no server", command: "sbx", args: ["ls"], env: nobody, expect: 8 },
      {
        label: "tsx runtime/cli (before)",
        command: process.execPath,
        args: ["--import", "tsx", "runtime/cli/main.ts", "ls"],
        env: live,
        expect: 0,
      },
      { label: "npx sbx ls", command: "npx", args: ["sbx", "ls"], env: live, expect: 0 },
      {
        label: "npm run sbx -- ls",
        command: "npm",
        args: ["run", "--silent", "sbx", "--", "ls"],
        env: live,
        expect: 0,
      },
    ];
    const baseEnv = { ...process.env, PATH: `${join(repo, "node_modules/.bin")}:${process.env.PATH}` };
    const times = new Map<string, number[]>(cases.map((c) => [c.label, []]));
    // warm-up rounds also make sure the build is fresh before anything is measured
    for (let round = 0; round < WARMUP + SAMPLES; round++) {
      for (let k = 0; k < cases.length; k++) {
        const c = cases[(k + round) % cases.length]; // rotate the order: no case always runs first
        const ms = await timeOnce(c, baseEnv);
        if (round >= WARMUP) times.get(c.label)!.push(ms);
      }
    }
    // the first call after an edit rebuilds; dropping the manifest makes the build stale the
    // same way without touching sources
    const rebuild: number[] = [];
    for (let i = 0; i < REBUILDS; i++) {
      rmSync(join(repo, "dist/cli/manifest.json"), { force: true });
      rebuild.push(await timeOnce(cases[1], baseEnv));
    }

    const base = nearestRank(times.get("node -e 0")!, 50)!;
    const basep95 = nearestRank(times.get("node -e 0")!, 95)!;
    const results = Object.fromEntries(
      [...times].map(([label, xs]) => {
        const s = stats(xs);
        return [label, { ...s, ratioP50: round(s.p50 / base), ratioP95: round(s.p95 / basep95) }];
      }),
    );
    const rebuildStats = stats(rebuild);
    const out = {
      bench: "cli-startup",
      machine: {
        cpus: os.cpus().length,
        node: process.version,
        kernel: os.release(),
        loadAvgAtStart,
        loadAvgAtEnd: os.loadavg()[0],
      },
      samples: SAMPLES,
      results,
      firstCallAfterEdit: { ...rebuildStats, ratioP50: round(rebuildStats.p50 / base) },
    };
    process.stdout.write(`${JSON.stringify(out)}\n\n`);
    const rows = [...Object.entries(results), ["first call after an edit (rebuild)", out.firstCallAfterEdit] as const];
    process.stdout.write(
      `${"command".padEnd(36)} ${"n".padStart(3)} ${"p50 ms".padStart(8)} ${"p95 ms".padStart(8)} ${"÷ node p50".padStart(11)}\n`,
    );
    for (const [label, s] of rows)
      process.stdout.write(
        `${label.padEnd(36)} ${String(s.n).padStart(3)} ${s.p50.toFixed(1).padStart(8)} ${s.p95.toFixed(1).padStart(8)} ${`${s.ratioP50.toFixed(2)}×`.padStart(11)}\n`,
      );
    process.stdout.write(
      `load average ${loadAvgAtStart.toFixed(1)} at start, ${os.loadavg()[0].toFixed(1)} at end (${os.cpus().length} cores)\n`,
    );
  } finally {
    await service.close();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`cli-startup: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
