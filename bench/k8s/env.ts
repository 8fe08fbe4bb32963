// Shared setup of the Kubernetes benchmarks: a control plane (tools/control-plane/standalone.ts:
// the one in SBX_TEST_KUBECONFIG, else a fresh one booted as the test suite boots it), the Sandbox
// CRD, a namespace pair, extra simulated nodes, and a Manager on the Kubernetes backend.
// Benchmarks print numbers; they assert nothing.
import { buildManager } from "../../runtime/backends.ts";
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createKubernetesPlatform } from "../../runtime/kubernetes.ts";
import {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  testConfig,
} from "../../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../../tools/control-plane/standalone.ts";
import { nearestRank } from "../lib/percentile.ts";

export async function benchRuntime(prefix: string, input: Partial<RuntimeConfigInput>, extraNodes: number) {
  const cp = await kubeconfig();
  const clients = adminClients(cp.path);
  await installSandboxCrd(clients.kc);
  const removeNodes = extraNodes > 0 ? await addSandboxNodes(clients.core, prefix, extraNodes) : async () => undefined;
  const ns = await freshNamespaces(clients.core, prefix);
  const config = testConfig(ns, input);
  const platform = createKubernetesPlatform(
    config,
    { logger: silentLogger(), clock: systemClock },
    { clients, retryPeriodMs: 1000, leaseDurationMs: 15_000, activityFlushMs: 500 },
  );
  const { manager } = await buildManager(config, {
    logger: silentLogger(),
    clock: systemClock,
    platform,
    reaperIntervalMs: 3_600_000,
  });
  await manager.start({ reaper: false });
  for (let i = 0; i < 200 && !platform.testing.controller.isLeader(); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    clients,
    config,
    platform,
    backend: platform.backend,
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
