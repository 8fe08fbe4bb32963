// The E2B REST layer's cost, measured in the same run against the same local service: the real
// SDK's Sandbox.create -> kill round trip next to our own API's create -> wait -> kill (both over
// HTTP on loopback, ready before the clock stops), and one small read each (getInfo vs GET /v1).
// Trials alternate between the two so drift on a shared machine hits both alike. Prints JSON
// lines (one summary per metric), then a table. Asserts nothing: the tests assert behaviour.
//   npx tsx bench/e2b.ts [--samples 30] [--warmup 3]
// Needs root (bubblewrap, cgroups), like every local-platform run.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Sandbox } from "e2b";
import { buildManager } from "../runtime/backends.ts";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createLocalPlatform } from "../runtime/local/platform.ts";
import { buildApp } from "../runtime/server/app.ts";
import { nearestRank } from "./lib/percentile.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SAMPLES = arg("samples", 30);
const WARMUP = arg("warmup", 3);

async function main(): Promise<void> {
  const stateDir = mkdtempSync(join(tmpdir(), "sbx-bench-e2b-"));
  const config = validateRuntimeConfig({ budget: { cpu: "2", memory: "8Gi" }, local: { stateDir } });
  const made = { config, cleanup: () => rmSync(stateDir, { recursive: true, force: true }) };
  const TOKEN = "bench-e2b-token-0123456789";
  const tokens = () => new TokenStore(new Map([[hashToken(TOKEN), "bench"]]));
  const logger = silentLogger();
  const platform = createLocalPlatform(made.config, { logger, clock: systemClock });
  const { manager } = await buildManager(made.config, { logger, clock: systemClock, platform });
  const app = buildApp({ manager, tokens: tokens(), logger, e2b: { sweepIntervalMs: 0 } });
  await manager.start({ reaper: false });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  const sdk = { apiKey: TOKEN, apiUrl: url, sandboxUrl: url };
  const auth = { authorization: `Bearer ${TOKEN}` };
  const ours = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: body === undefined ? auth : { ...auth, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.status === 204 ? undefined : res.json();
  };
  const samples: Record<string, number[]> = {
    sdk_create_kill_ms: [],
    api_create_kill_ms: [],
    sdk_get_info_ms: [],
    api_get_ms: [],
  };
  const time = async (key: string, fn: () => Promise<unknown>, measured: boolean) => {
    const t0 = performance.now();
    await fn();
    if (measured) samples[key].push(performance.now() - t0);
  };
  try {
    for (let i = 0; i < WARMUP + SAMPLES; i++) {
      const measured = i >= WARMUP;
      let sbx: Sandbox | undefined;
      await time(
        "sdk_create_kill_ms",
        async () => {
          sbx = await Sandbox.create("base", sdk);
          await sbx.kill();
        },
        measured,
      );
      await time(
        "api_create_kill_ms",
        async () => {
          const s = (await ours("POST", "/v1/sandboxes", { size: "nano" })) as { id: string };
          await ours("POST", `/v1/sandboxes/${s.id}/wait`, { timeoutSeconds: 60 });
          await ours("DELETE", `/v1/sandboxes/${s.id}`);
        },
        measured,
      );
      // one sandbox for the small reads, read both ways
      const kept = await Sandbox.create("base", sdk);
      await time("sdk_get_info_ms", () => kept.getInfo(), measured);
      await time("api_get_ms", () => ours("GET", `/v1/sandboxes/${kept.sandboxId}`), measured);
      await kept.kill();
    }
  } finally {
    await app.close();
    await manager.close();
    made.cleanup();
  }
  const rows = Object.entries(samples).map(([metric, xs]) => ({
    type: "summary",
    metric,
    n: xs.length,
    p50: round(nearestRank(xs, 50)),
    p95: round(nearestRank(xs, 95)),
    max: round(nearestRank(xs, 100)),
  }));
  for (const r of rows) console.log(JSON.stringify(r));
  const p50 = (m: string) => rows.find((r) => r.metric === m)?.p50 ?? Number.NaN;
  console.log(
    JSON.stringify({
      type: "overhead",
      create_kill_p50_ms: round(p50("sdk_create_kill_ms") - p50("api_create_kill_ms")),
      read_p50_ms: round(p50("sdk_get_info_ms") - p50("api_get_ms")),
    }),
  );
  console.log(
    `\n${"metric".padEnd(22)}${"n".padStart(5)}${"p50 ms".padStart(10)}${"p95 ms".padStart(10)}${"max ms".padStart(10)}`,
  );
  for (const r of rows)
    console.log(
      `${r.metric.padEnd(22)}${String(r.n).padStart(5)}${String(r.p50).padStart(10)}${String(r.p95).padStart(10)}${String(r.max).padStart(10)}`,
    );
}

const round = (x: number | null) => (x === null ? Number.NaN : Math.round(x * 100) / 100);

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
