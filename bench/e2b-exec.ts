// What the E2B layer adds to a command's round trip: the real SDK's `commands.run('true')`
// (envd's process.Process/Start over Connect, served by the control plane) against our own
// API's exec of the same command line (`/bin/bash -l -c true`, as the SDK sends it) and of
// bare `true`, on the same sandbox and service, interleaved round by round so machine load
// moves them all alike. Both go over a real socket to the service `npm start` runs. Prints
// JSON, then a table.
//   npx tsx bench/e2b-exec.ts [--samples 200]
// Needs root (the local service runs real sandboxes). Asserts nothing: tests assert behaviour.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Sandbox } from "e2b";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createLocalBackend } from "../runtime/local/backend.ts";
import { startService } from "../runtime/server/service.ts";
import { nearestRank } from "./lib/percentile.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SAMPLES = arg("samples", 200);
const WARMUP = 10;
const TOKEN = "sbx_bench_e2b_exec_0123456789";

/** our API's exec, the whole NDJSON response read */
async function apiExec(url: string, id: string, command: string[]): Promise<void> {
  const res = await fetch(`${url}/v1/sandboxes/${id}/exec`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ command }),
  });
  const body = await res.text();
  if (res.status !== 200 || !body.includes('"exitCode":0')) throw new Error(`exec: ${res.status} ${body}`);
}

function envelope(msg: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** envd's Start as the SDK sends it, without the SDK: what the server side costs alone */
async function rawStart(url: string, id: string, accessToken: string): Promise<void> {
  const res = await fetch(`${url}/process.Process/Start`, {
    method: "POST",
    headers: {
      "content-type": "application/connect+json",
      "connect-protocol-version": "1",
      "e2b-sandbox-id": id,
      "x-access-token": accessToken,
    },
    body: envelope({ process: { cmd: "/bin/bash", args: ["-l", "-c", "true"] }, stdin: false }),
  });
  const body = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200 || !body.includes('"end"')) throw new Error(`start: ${res.status} ${body}`);
}

const round = (x: number) => Math.round(x * 100) / 100;

async function main(): Promise<void> {
  const stateDir = mkdtempSync(join(os.tmpdir(), "sbx-bench-e2b-"));
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 }, warmPool: [] });
  const logger = silentLogger();
  const service = await startService({
    config,
    tokens: new TokenStore(new Map([[hashToken(TOKEN), "bench"]])),
    logger,
    clock: systemClock,
    backend: createLocalBackend(config, { logger, clock: systemClock }),
    port: 0,
  });
  const loadAvgAtStart = os.loadavg()[0];
  try {
    const sbx = await Sandbox.create("base", { apiKey: TOKEN, apiUrl: service.url, sandboxUrl: service.url });
    const id = sbx.sandboxId;
    // the SDK keeps it to itself; the raw case needs it (the SDK sends it on every envd call)
    const accessToken = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const cases: { label: string; run: () => Promise<unknown> }[] = [
      { label: "e2b sdk commands.run('true')", run: () => sbx.commands.run("true") },
      { label: "envd Start over fetch (no SDK)", run: () => rawStart(service.url, id, accessToken) },
      {
        label: "sbx exec /bin/bash -l -c true",
        run: () => apiExec(service.url, id, ["/bin/bash", "-l", "-c", "true"]),
      },
      { label: "sbx exec true", run: () => apiExec(service.url, id, ["true"]) },
    ];
    const ms: number[][] = cases.map(() => []);
    for (let i = 0; i < WARMUP + SAMPLES; i++) {
      for (const [k, c] of cases.entries()) {
        const t0 = performance.now();
        await c.run();
        if (i >= WARMUP) ms[k]!.push(performance.now() - t0);
      }
    }
    const rows = cases.map((c, k) => ({
      label: c.label,
      samples: ms[k]!.length,
      p50: round(nearestRank(ms[k]!, 50) ?? Number.NaN),
      p90: round(nearestRank(ms[k]!, 90) ?? Number.NaN),
      p99: round(nearestRank(ms[k]!, 99) ?? Number.NaN),
    }));
    const added = round(rows[0]!.p50 - rows[2]!.p50);
    const result = {
      bench: "e2b-exec",
      platform: "local",
      samples: SAMPLES,
      node: process.version,
      cpus: os.cpus().length,
      loadAvgAtStart,
      loadAvgAtEnd: os.loadavg()[0],
      rows,
      e2bAddedP50Ms: added,
    };
    console.log(JSON.stringify(result));
    console.log("\n| case | samples | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|");
    for (const r of rows) console.log(`| ${r.label} | ${r.samples} | ${r.p50} | ${r.p90} | ${r.p99} |`);
    console.log(`\nE2B layer adds ${added} ms at p50 (SDK run vs our exec of the same bash -l -c command line)`);
    await sbx.kill();
  } finally {
    await service.close();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

await main();
