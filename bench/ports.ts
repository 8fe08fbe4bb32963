// Port relay benchmark (docs/ports.md, docs/benchmarks.md "Port relay"), on the local platform (the
// relay is the in-sandbox helper) or (--platform kubernetes) the test control plane, where it
// measures both of the backend's paths in one run: the pod's command channel (the default) and
// the API server's port-forward (a second service and Manager whose backend has channels off).
// In one run, against the same fixture server (test/server/fixtures/port-server.py):
//   direct_first_byte_ms  a fresh TCP connection + GET /echo to the server on the host's loopback
//   relays[].first_byte_ms  the same request through the service's path form (one relay per request)
//   download: direct and per relay, a 100 MiB download, SHA-256 compared
//   relays[].wake_first_byte_ms  a paused sandbox (post-resume hook starts the server) woken by the request
// Prints a JSON document and a table. Asserts nothing.
//
//   npx tsx bench/ports.ts [--samples 200] [--wakes 10] [--mib 100] [--output ports.json]
//       [--platform kubernetes]   (the test control plane; bench/lib/kubernetesTarget.ts)
//       [--paths channel]         (only these relay paths, comma-separated: e.g. to profile one)
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { buildManager } from "../runtime/backends.ts";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import type { SandboxManager } from "../runtime/core/manager.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createLocalPlatform } from "../runtime/local/platform.ts";
import { startLocalRegistry } from "../runtime/local/registry.ts";
import { buildApp } from "../runtime/server/app.ts";
import { portOptionsFrom } from "../runtime/server/ports/service.ts";
import { nearestRank } from "./lib/percentile.ts";
import { flags, intFlag, runnerEnvironment, targetArgs } from "./lib/target.ts";

const SERVER_FILE = new URL("../test/server/fixtures/port-server.py", import.meta.url).pathname;
const SERVER_PY = readFileSync(SERVER_FILE);
const TOKEN = "bench-token-0123456789";
const AUTH = { authorization: `Bearer ${TOKEN}` };
const START_SERVER = "nohup python3 /workspace/port-server.py 8000 >/tmp/server.log 2>&1 &";

interface Runtime {
  /** the service that creates and pauses the sandboxes: the first relay path */
  url: string;
  /** every relay path measured: name and service URL (the first is `url`) */
  paths: { name: string; url: string }[];
  /** the create body's size class */
  size: string;
  environment: Record<string, unknown>;
  close(): Promise<void>;
}

/** The service on the local backend, on a real socket, with the embedded-style loopback registry. */
async function startLocal(): Promise<Runtime> {
  const registry = await startLocalRegistry({ purpose: "bench registry" });
  const registryUrl = registry.url;
  const stateDir = mkdtempSync(join(tmpdir(), "sbx-bench-ports-"));
  const config = validateRuntimeConfig({ local: { stateDir }, snapshots: { registry: registryUrl } });
  const logger = silentLogger();
  const platform = createLocalPlatform(config, { logger, clock: systemClock });
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform });
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), "bench"]]));
  // the production service's port options (exposures in files under the state dir), as npm start has them
  const app = buildApp({ manager, tokens, logger, e2b: false, ports: portOptionsFrom(config) });
  await manager.start({ reaper: false });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return {
    url,
    paths: [{ name: "helper", url }],
    size: "nano",
    environment: { target: "local" },
    close: async () => {
      await app.close();
      await manager.close();
      rmSync(stateDir, { recursive: true, force: true });
      await registry.stop();
    },
  };
}

/**
 * The service over the Kubernetes target's Manager (the test control plane, or --kubeconfig),
 * whose relay is the command channel, and a second one over a Manager whose backend has
 * channels off, whose relay is the API server's port-forward. Exposures would live in metadata.
 */
async function startKubernetes(f: Map<string, string>): Promise<Runtime> {
  const { openKubernetes } = await import("./lib/kubernetesTarget.ts");
  const target = await openKubernetes(
    targetArgs(f, { size: "bench", profile: "base", warm: intFlag(f, "warm", 0), memoryLimit: "1Gi" }),
  );
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), target.owner]]));
  const serve = async (manager: SandboxManager) => {
    const app = buildApp({ manager, tokens, logger: silentLogger(), e2b: false, ports: { accessInMetadata: true } });
    return { app, url: await app.listen({ host: "127.0.0.1", port: 0 }) };
  };
  const main = await serve(target.manager as unknown as SandboxManager);
  const forward = await serve(
    (await target.replica({ commandChannel: { enabled: false } })) as unknown as SandboxManager,
  );
  return {
    url: main.url,
    paths: [
      { name: "channel", url: main.url },
      { name: "port-forward", url: forward.url },
    ],
    size: "bench",
    environment: target.environment,
    close: async () => {
      await forward.app.close();
      await main.app.close();
      await target.close();
    },
  };
}

async function call(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...AUTH, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return text;
}

async function sandbox(base: string, size: string, metadata: Record<string, string> = {}): Promise<string> {
  const id = JSON.parse(await call(base, "POST", "/v1/sandboxes", { size, metadata })).id as string;
  await call(base, "POST", `/v1/sandboxes/${id}/wait`, { timeoutSeconds: 60 });
  const exec = (script: string, stdin?: Buffer) =>
    call(base, "POST", `/v1/sandboxes/${id}/exec`, {
      command: ["sh", "-c", script],
      ...(stdin ? { stdin: stdin.toString("base64") } : {}),
    });
  await exec("cat > /workspace/port-server.py", SERVER_PY);
  return id;
}

/** ms from sending the request to the first byte of the body, and the body's sha256 + size. */
function get(
  url: string,
  headers: Record<string, string>,
): Promise<{ firstByteMs: number; sha: string; bytes: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = 0;
    const h = createHash("sha256");
    let bytes = 0;
    http
      .get(url, { headers, agent: false }, (res) => {
        res.on("data", (c: Buffer) => {
          if (!first) first = performance.now() - t0;
          h.update(c);
          bytes += c.length;
        });
        res.on("end", () => resolve({ firstByteMs: first, sha: h.digest("hex"), bytes, ms: performance.now() - t0 }));
        res.on("error", reject);
      })
      .on("error", reject);
  });
}

/** Waits (at most 10 s) for the direct fixture server: python may still be starting. */
async function listening(base: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await get(`${base}/echo`, {});
      return;
    } catch (err) {
      if (i >= 200) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const stats = (xs: number[]) => ({
  p50: nearestRank(xs, 50),
  p95: nearestRank(xs, 95),
  p99: nearestRank(xs, 99),
  n: xs.length,
});

async function main(): Promise<void> {
  const f = flags(process.argv.slice(2));
  const samples = intFlag(f, "samples", 200, 1);
  const wakes = intFlag(f, "wakes", 10, 0);
  const mib = intFlag(f, "mib", 100, 1);
  const rt = f.get("platform") === "kubernetes" || f.has("kubeconfig") ? await startKubernetes(f) : await startLocal();
  const only = f.get("paths")?.split(",");
  if (only) rt.paths = rt.paths.filter((p) => only.includes(p.name));
  const host = spawn("python3", [SERVER_FILE, "18777"], { stdio: "ignore" });
  host.on("error", (err) => console.error(`the direct fixture server: ${err.message}`));
  try {
    const id = await sandbox(rt.url, rt.size);
    await call(rt.url, "POST", `/v1/sandboxes/${id}/exec`, {
      command: [
        "sh",
        "-c",
        `${START_SERVER} for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 8000))" 2>/dev/null && exit 0; sleep 0.1; done; exit 1`,
      ],
    });
    const relay = (base: string) => `${base}/v1/sandboxes/${id}/ports/8000`;
    const direct = "http://127.0.0.1:18777";
    await listening(direct);
    const d: number[] = [];
    const r = rt.paths.map(() => [] as number[]);
    for (let i = 0; i < samples; i++) {
      // interleaved, so load on the shared machine hits every path alike
      d.push((await get(`${direct}/echo`, {})).firstByteMs);
      for (const [k, p] of rt.paths.entries()) r[k].push((await get(`${relay(p.url)}/echo`, AUTH)).firstByteMs);
    }
    const bigD = await get(`${direct}/big?mb=${mib}`, {});
    const relays = [];
    for (const [k, p] of rt.paths.entries()) {
      const big = await get(`${relay(p.url)}/big?mb=${mib}`, AUTH);
      const w: number[] = [];
      for (let i = 0; i < wakes; i++) {
        const sid = await sandbox(rt.url, rt.size, { "sbx.post-resume": START_SERVER });
        await call(rt.url, "POST", `/v1/sandboxes/${sid}/pause`);
        w.push((await get(`${p.url}/v1/sandboxes/${sid}/ports/8000/echo`, AUTH)).firstByteMs);
        await call(rt.url, "DELETE", `/v1/sandboxes/${sid}`);
      }
      relays.push({
        path: p.name,
        first_byte_ms: stats(r[k]),
        added_p50_ms: (nearestRank(r[k], 50) ?? 0) - (nearestRank(d, 50) ?? 0),
        download_mib_s: mib / (big.ms / 1000),
        sha256_match: bigD.sha === big.sha && big.bytes === mib << 20,
        wake_first_byte_ms: stats(w),
      });
    }
    const out = {
      environment: { ...runnerEnvironment(), ...rt.environment },
      direct_first_byte_ms: stats(d),
      direct_download_mib_s: mib / (bigD.ms / 1000),
      download_mib: mib,
      relays,
    };
    const json = JSON.stringify(out, null, 2);
    if (f.get("output")) writeFileSync(f.get("output")!, json);
    console.log(json);
    const row = (name: string, s: ReturnType<typeof stats>) =>
      `${name.padEnd(30)} p50 ${s.p50?.toFixed(2)} ms  p95 ${s.p95?.toFixed(2)} ms  p99 ${s.p99?.toFixed(2)} ms  (n=${s.n})`;
    console.log(row("direct first byte", out.direct_first_byte_ms));
    console.log(`direct download ${mib} MiB: ${out.direct_download_mib_s.toFixed(0)} MiB/s`);
    for (const x of relays) {
      console.log(row(`${x.path}: first byte`, x.first_byte_ms));
      console.log(row(`${x.path}: wake to first byte`, x.wake_first_byte_ms));
      console.log(
        `${x.path}: added p50 ${x.added_p50_ms.toFixed(2)} ms; download ${x.download_mib_s.toFixed(0)} MiB/s, sha256 match ${x.sha256_match}`,
      );
    }
  } finally {
    host.kill();
    await rt.close();
  }
}

await main();
