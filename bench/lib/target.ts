// What the pause/resume benchmarks drive: the Manager seam, either in-process on the local
// backend (with its own docker-registry unless --registry is given), in-process on the
// Kubernetes backend (--platform kubernetes: the test control plane; --kubeconfig: a real
// cluster; kubernetesTarget.ts), or a running sbx server (--server/--token) over HTTP.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { buildManager } from "../../runtime/backends.ts";
import { HttpManager } from "../../runtime/client/http.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { startLocalRegistry } from "../../runtime/local/registry.ts";
import { createPauseResume } from "../../runtime/snapshot/wire.ts";
import type { BenchTarget, TargetArgs } from "./benchTarget.ts";

export type { BenchTarget, TargetArgs };

export async function openTarget(a: TargetArgs): Promise<BenchTarget> {
  if (a.server) return openServer(a);
  if (a.platform === "kubernetes" || a.kubeconfig) return (await import("./kubernetesTarget.ts")).openKubernetes(a);
  return openLocal(a);
}

/** The target flags both benchmarks accept; `fixed` holds what the benchmark itself decides. */
export function targetArgs(
  f: Map<string, string>,
  fixed: Pick<TargetArgs, "size" | "profile" | "warm"> & Partial<TargetArgs>,
): TargetArgs {
  const platform = f.get("platform") ?? (f.has("kubeconfig") ? "kubernetes" : "local");
  if (platform !== "local" && platform !== "kubernetes")
    throw new Error(`--platform: invalid value ${JSON.stringify(platform)}: use local or kubernetes`);
  if (f.has("kubeconfig") && platform !== "kubernetes")
    throw new Error(`--kubeconfig: only with --platform kubernetes (got --platform ${platform})`);
  return {
    platform,
    kubeconfig: f.get("kubeconfig"),
    namespace: f.get("namespace"),
    runtimeNamespace: f.get("runtime-namespace"),
    image: f.get("image"),
    runtimeClass: f.get("runtime-class"),
    podLayers: f.has("pod-layers") && f.get("pod-layers") !== "false",
    registryTokens: f.has("registry-tokens") && f.get("registry-tokens") !== "false",
    server: f.get("server"),
    token: f.get("token") ?? process.env.SBX_TOKEN,
    owner: f.get("owner") ?? "bench",
    registry: f.get("registry"),
    ...fixed,
  };
}

async function openServer(a: TargetArgs): Promise<BenchTarget> {
  const manager = new HttpManager({ server: a.server!, token: a.token }) as unknown as BenchTarget["manager"];
  return {
    kind: "server",
    manager,
    owner: a.owner,
    registry: a.registry,
    // a paused sandbox reserves nothing once its compute is released
    computeGone: async (id) => {
      const s = await manager.get(a.owner, id);
      return s.phase === "Paused" && s.cpuRequestMillis === 0;
    },
    environment: { target: "server", server: a.server },
    close: async () => undefined,
  };
}

async function openLocal(a: TargetArgs): Promise<BenchTarget> {
  const registry = a.registry ? undefined : await startLocalRegistry({ purpose: "bench registry" });
  const registryUrl = a.registry ?? registry!.url;
  const stateDir = mkdtempSync(join(os.tmpdir(), "sbxb-"));
  const config = validateRuntimeConfig({
    local: { stateDir },
    snapshots: { registry: registryUrl },
    sizeClasses: {
      [a.size]: {
        cpuRequest: "250m",
        cpuLimit: "2",
        memoryRequest: "256Mi",
        memoryLimit: a.memoryLimit ?? "3Gi",
        workspace: a.workspace ?? "6Gi",
        tmp: a.tmp ?? "1536Mi",
        pids: 256,
      },
    },
    budget: { cpu: "64", memory: "256Gi" },
    defaults: { size: a.size, profile: a.profile },
    warmPool: a.warm > 0 ? [{ profile: a.profile, size: a.size, count: a.warm }] : [],
  });
  const logger = silentLogger();
  const local = createLocalPlatform(config, { logger, clock: systemClock });
  const backend = createPauseResume(
    { backend: local.backend, pause: local.pause! },
    { config, clock: systemClock, logger },
  );
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform: local, pauseResume: backend });
  await manager.start({ reaper: false, maintenance: a.maintenance ?? false });
  return {
    kind: "local",
    manager: manager as unknown as BenchTarget["manager"],
    owner: a.owner,
    registry: registryUrl,
    computeGone: async (id) => (await local.backend.describe(id)) === undefined,
    snapshotOf: async (id) => {
      const s = (await backend.snapshotter.status(id))?.snapshot;
      return s && { ref: s.ref, digest: s.digest, sizeBytes: s.sizeBytes, layers: s.layers.length };
    },
    environment: {
      target: "local",
      registry: a.registry
        ? `given: ${a.registry}`
        : `docker-registry ${registryVersion()} on loopback, filesystem storage under ${os.tmpdir()}`,
      state_dir: stateDir,
      size_class: config.sizeClasses[a.size],
      warm_pool: config.warmPool,
    },
    close: async () => {
      await manager.close();
      await registry?.stop();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

function registryVersion(): string {
  try {
    return execFileSync("/usr/bin/docker-registry", ["--version"]).toString().trim().split(" ").pop() ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** Facts about the runner that a reader needs to repeat the experiment (no secrets). */
export function runnerEnvironment(): Record<string, unknown> {
  let revision = "unknown";
  let dirty = false;
  try {
    revision = execFileSync("git", ["rev-parse", "HEAD"], { stdio: ["ignore", "pipe", "ignore"] })
      .toString()
      .trim();
    dirty =
      execFileSync("git", ["status", "--porcelain", "--", "runtime", "bench"], { stdio: ["ignore", "pipe", "ignore"] })
        .toString()
        .trim() !== "";
  } catch {
    // not a git checkout
  }
  return {
    runner_revision: revision,
    runner_tree_dirty: dirty,
    node: process.version,
    os: `${os.type()} ${os.release()}`,
    arch: os.arch(),
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model,
    memory_bytes: os.totalmem(),
    load_average_1m: os.loadavg()[0],
    hostname_hash: Buffer.from(os.hostname()).toString("base64url").slice(0, 8),
  };
}

/** Minimal flag parsing: --name value, --flag. */
export function flags(argv: string[]): Map<string, string> {
  const m = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${JSON.stringify(a)}: flags look like --name value`);
    const next = argv[i + 1];
    if (next === undefined || next.startsWith("--")) m.set(a.slice(2), "true");
    else {
      m.set(a.slice(2), next);
      i++;
    }
  }
  return m;
}

export function intFlag(f: Map<string, string>, name: string, dflt: number, min = 0): number {
  const v = f.get(name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min)
    throw new Error(`--${name}: invalid value ${JSON.stringify(v)}: use a whole number >= ${min}`);
  return n;
}
