// The test control plane outside vitest (benchmarks, by hand): the one in SBX_TEST_KUBECONFIG,
// else a fresh one booted exactly as the k8s test project's global setup boots it, in a
// temporary directory, stopped by stop() or when the process exits.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { bootCluster, type Cluster } from "./boot.ts";
import { ProcessGroup } from "./processes.ts";

const repo = resolve(import.meta.dirname, "../..");

/**
 * The test control plane's kubeconfig. `registry` is the docker-registry the boot starts next to
 * the cluster (as the suite's global setup does); undefined with SBX_TEST_KUBECONFIG, where the
 * caller must bring its own.
 */
export async function kubeconfig(): Promise<{
  path: string;
  registry?: string;
  /** the boot's second registry, in `auth: token` mode (plan.ts tokenRegistryConfig) */
  tokenRegistry?: Cluster["tokenRegistry"];
  stop: () => Promise<void>;
}> {
  if (process.env.SBX_TEST_KUBECONFIG) return { path: process.env.SBX_TEST_KUBECONFIG, stop: async () => undefined };
  const version = /\bk8s\.io\/kubernetes (v[0-9][^\s]*)/.exec(
    readFileSync(join(repo, "tools/control-plane/go.mod"), "utf8"),
  )?.[1];
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
      tokenRegistry: cluster.tokenRegistry,
      stop: async () => {
        await group.stopAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    group.killAllNow();
    throw new Error(
      `could not boot the control plane from ${bin} (build it with npm run tools:k8s, or set SBX_TEST_KUBECONFIG): ${(err as Error).message}`,
    );
  }
}
