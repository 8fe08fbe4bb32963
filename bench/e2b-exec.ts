// What the E2B layer adds to a command's round trip: the real SDK's `commands.run('true')`
// (envd's process.Process/Start over Connect, served by the control plane) against our own
// API's exec of the same command line (`/bin/bash -l -c true`, as the SDK sends it) and of
// bare `true`, on the same sandbox and service, interleaved round by round so machine load
// moves them all alike. Everything goes over a real socket.
//   npx tsx bench/e2b-exec.ts [--samples 200] [--platform local|kubernetes] [--service inproc|child]
// --service inproc (the default, as the first measurements ran) runs the service in this
// process, so the SDK's client work and the service's share one event loop; child runs it in a
// process of its own, as `npm start` does, so they share only the cores (on this 2-core machine
// under load that is the slower of the two: docs/benchmarks.md). --platform kubernetes starts the service on
// the test control plane (SBX_TEST_KUBECONFIG, else a fresh one, as bench/k8s/env.ts does).
// The added cost is reported twice: the difference of the two p50s, and the median of the
// per-round differences (less moved by load that changes between rounds). Prints JSON, then a
// table. Needs root (real sandboxes). Asserts nothing: tests assert behaviour.
import os from "node:os";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createKubernetesPlatform } from "../runtime/kubernetes.ts";
import { startService } from "../runtime/server/service.ts";
import { adminClients, freshNamespaces, installSandboxCrd, testConfig } from "../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../tools/control-plane/standalone.ts";
import { nearestRank } from "./lib/percentile.ts";
import { type RunningService, serveInChild, serveLocal, serveUntilStdinEnds } from "./lib/serviceProcess.ts";

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? dflt) : dflt;
};
const SAMPLES = Number(arg("samples", "200"));
const PLATFORM = arg("platform", "local");
const SERVICE = arg("service", "inproc");
const WARMUP = 10;
const TOKEN = "sbx_bench_e2b_exec_0123456789";

if (!["local", "kubernetes"].includes(PLATFORM)) throw new Error(`--platform ${PLATFORM}: use local or kubernetes`);
if (!["child", "inproc"].includes(SERVICE)) throw new Error(`--service ${SERVICE}: use child or inproc`);

/** The service on the chosen platform, in this process. */
async function serve(): Promise<RunningService> {
  const logger = silentLogger();
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), "bench"]]));
  if (PLATFORM === "kubernetes") {
    const cp = await kubeconfig();
    const clients = adminClients(cp.path);
    await installSandboxCrd(clients.kc);
    const ns = await freshNamespaces(clients.core, "bench-e2b");
    const config = testConfig(ns, { listen: { host: "127.0.0.1", port: 0 }, warmPool: [] });
    const platform = createKubernetesPlatform(
      config,
      { logger, clock: systemClock },
      { clients, retryPeriodMs: 1000, leaseDurationMs: 15_000, activityFlushMs: 500 },
    );
    const service = await startService({ config, tokens, logger, clock: systemClock, platform, port: 0 });
    for (let i = 0; i < 200 && !platform.testing.controller.isLeader(); i++)
      await new Promise((r) => setTimeout(r, 100));
    return {
      url: service.url,
      close: async () => {
        await service.close();
        await ns.cleanup();
        await cp.stop();
      },
    };
  }
  return serveLocal(TOKEN, "sbx-bench-e2b-");
}

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

async function measure(url: string): Promise<void> {
  const loadAvgAtStart = os.loadavg()[0];
  const sbx = await Sandbox.create("base", { apiKey: TOKEN, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 150_000 });
  const id = sbx.sandboxId;
  // the SDK keeps it to itself; the raw case needs it (the SDK sends it on every envd call)
  const accessToken = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  const cases: { label: string; run: () => Promise<unknown> }[] = [
    { label: "e2b sdk commands.run('true')", run: () => sbx.commands.run("true") },
    { label: "envd Start over fetch (no SDK)", run: () => rawStart(url, id, accessToken) },
    { label: "sbx exec /bin/bash -l -c true", run: () => apiExec(url, id, ["/bin/bash", "-l", "-c", "true"]) },
    { label: "sbx exec true", run: () => apiExec(url, id, ["true"]) },
  ];
  const ms: number[][] = cases.map(() => []);
  try {
    for (let i = 0; i < WARMUP + SAMPLES; i++) {
      for (const [k, c] of cases.entries()) {
        const t0 = performance.now();
        await c.run();
        if (i >= WARMUP) ms[k]!.push(performance.now() - t0);
      }
    }
  } finally {
    await sbx.kill();
  }
  const p = (xs: number[], q: number) => round(nearestRank(xs, q) ?? Number.NaN);
  const rows = cases.map((c, k) => ({
    label: c.label,
    samples: ms[k]!.length,
    p50: p(ms[k]!, 50),
    p90: p(ms[k]!, 90),
    p99: p(ms[k]!, 99),
  }));
  const added = round(rows[0]!.p50 - rows[2]!.p50);
  const pairedAdded = p(
    ms[0]!.map((x, i) => x - ms[2]![i]!),
    50,
  );
  const serverAdded = p(
    ms[1]!.map((x, i) => x - ms[2]![i]!),
    50,
  );
  const result = {
    bench: "e2b-exec",
    platform: PLATFORM,
    service: SERVICE,
    samples: SAMPLES,
    node: process.version,
    cpus: os.cpus().length,
    loadAvgAtStart,
    loadAvgAtEnd: os.loadavg()[0],
    rows,
    e2bAddedP50Ms: added,
    e2bAddedPairedMedianMs: pairedAdded,
    rawStartAddedPairedMedianMs: serverAdded,
  };
  console.log(JSON.stringify(result));
  console.log("\n| case | samples | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|");
  for (const r of rows) console.log(`| ${r.label} | ${r.samples} | ${r.p50} | ${r.p90} | ${r.p99} |`);
  console.log(
    `\nE2B layer adds ${added} ms at p50 (${pairedAdded} ms median of per-round differences; without the SDK ${serverAdded} ms), ${PLATFORM}, service ${SERVICE}`,
  );
}

if (process.argv.includes("--serve")) {
  await serveUntilStdinEnds(serve);
} else {
  const running =
    SERVICE === "child" ? await serveInChild(fileURLToPath(import.meta.url), ["--platform", PLATFORM]) : await serve();
  try {
    await measure(running.url);
  } finally {
    await running.close();
  }
}
