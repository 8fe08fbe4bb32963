// Shared setup of the Kubernetes benchmarks: a control plane (the one in SBX_TEST_KUBECONFIG,
// else a fresh one booted exactly as the test suite boots it, stopped on exit), the Sandbox
// CRD, a namespace pair, extra simulated nodes, and a Manager on the Kubernetes backend.
// Benchmarks print numbers; they assert nothing.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildManager } from "../../runtime/backends.ts";
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { bootCluster } from "../../test/setup/boot.ts";
import { ProcessGroup } from "../../test/setup/processes.ts";
import { addSandboxNodes, adminClients, freshNamespaces, installSandboxCrd, testBackend, testConfig } from "../../test/k8s/runtime/support.ts";
import { nearestRank } from "../lib/percentile.ts";

const repo = resolve(import.meta.dirname, "../..");

/**
 * The test control plane's kubeconfig. `registry` is the docker-registry the boot starts next to
 * the cluster (as the suite's global setup does); undefined with SBX_TEST_KUBECONFIG, where the
 * caller must bring its own.
 */
export async function kubeconfig(): Promise<{ path: string; registry?: string; stop: () => Promise<void> }> {
  if (process.env.SBX_TEST_KUBECONFIG) return { path: process.env.SBX_TEST_KUBECONFIG, stop: async () => undefined };
  const version = /\bk8s\.io\/kubernetes (v[0-9][^\s]*)/.exec(readFileSync(join(repo, "tools/control-plane/go.mod"), "utf8"))?.[1];
  const bin = process.env.SBX_CONTROL_PLANE_BIN ?? join(repo, ".cache/control-plane", version ?? "missing", "bin");
  const dir = mkdtempSync(join(tmpdir(), "sbx-bench-cp-"));
  for (const sub of ["logs", "pki", "etcd", "pods", "registry"]) mkdirSync(join(dir, sub));
  const group = new ProcessGroup(join(dir, "logs"), join(dir, "pids"));
  process.once("exit", () => group.killAllNow());
  try {
    const cluster = await bootCluster({ bin, dir }, group);
    return {
      path: cluster.kubeconfigPath,
      registry: cluster.registryUrl,
      stop: async () => {
        await group.stopAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    group.killAllNow();
    throw new Error(`could not boot the control plane from ${bin} (build it with npm run tools:k8s, or set SBX_TEST_KUBECONFIG): ${(err as Error).message}`);
  }
}

export async function benchRuntime(prefix: string, input: Partial<RuntimeConfigInput>, extraNodes: number) {
  const cp = await kubeconfig();
  const clients = adminClients(cp.path);
  await installSandboxCrd(clients.kc);
  const removeNodes = extraNodes > 0 ? await addSandboxNodes(clients.core, prefix, extraNodes) : async () => undefined;
  const ns = await freshNamespaces(clients.core, prefix);
  const config = testConfig(ns, input);
  const backend = testBackend(config, clients, { retryPeriodMs: 1000, leaseDurationMs: 15_000 });
  const { manager } = await buildManager(config, { logger: silentLogger(), clock: systemClock, backend, reaperIntervalMs: 3_600_000 });
  await manager.start({ reaper: false });
  for (let i = 0; i < 200 && !backend.controller.isLeader(); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    clients,
    config,
    backend,
    manager,
    ns,
    close: async () => {
      await manager.close();
      await ns.cleanup();
      await removeNodes();
      await cp.stop();
    },
  };
}

export function stats(xs: number[]): { n: number; p50: number | null; p99: number | null; max: number | null } {
  const r = (v: number | null) => (v === null ? null : Math.round(v * 100) / 100);
  return { n: xs.length, p50: r(nearestRank(xs, 50)), p99: r(nearestRank(xs, 99)), max: r(nearestRank(xs, 100)) };
}

export function table(rows: Record<string, string | number | null>[]): string {
  if (!rows.length) return "";
  const cols = Object.keys(rows[0]);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c] ?? "-").length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(width[i])).join("  ");
  return [line(cols), ...rows.map((r) => line(cols.map((c) => String(r[c] ?? "-"))))].join("\n");
}

export const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
