// Helpers for the Kubernetes backend's integration tests: the kubeconfig of the control plane
// the suite started, the contract (CRD) installed, a fresh namespace pair per test file, and
// a backend built on top. The cluster fixtures live in tools/control-plane/fixtures.ts (the
// benchmarks use them too); they are re-exported here so tests import one module.
import { RbacAuthorizationV1Api, type V1Pod } from "@kubernetes/client-node";
import type { Role } from "../../../runtime/config/role.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { SandboxSpec } from "../../../runtime/core/types.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { createLogger, silentLogger } from "../../../runtime/core/log.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import {
  createKubernetesBackend,
  type KubernetesBackend,
  type KubernetesBackendOverrides,
} from "../../../runtime/kubernetes.ts";

export {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  testConfig,
  type TestNamespaces,
} from "../../../tools/control-plane/fixtures.ts";

/** The suite's kubeconfig: vitest's provided value, else SBX_TEST_KUBECONFIG. Fails loudly when neither is set. */
export async function testKubeconfigPath(): Promise<string> {
  let injected: string | undefined;
  try {
    const { inject } = await import("vitest");
    injected = (inject as (k: string) => string | undefined)("kubeconfigPath");
  } catch {
    injected = undefined; // outside vitest (benchmarks)
  }
  const path = injected ?? process.env.SBX_TEST_KUBECONFIG;
  if (!path)
    throw new Error(
      "no test kubeconfig: run through `npx vitest run --project k8s` (its global setup starts the control plane) or set SBX_TEST_KUBECONFIG to a kubeconfig path",
    );
  return path;
}

/** A SandboxSpec for the suite's catalog and size classes (owner alice, base/nano, 900 s TTL). */
export function testSandboxSpec(config: RuntimeConfig, id: string, over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id,
    owner: "alice",
    image: { profile: "base", image: config.catalog.base },
    size: config.sizeClasses.nano,
    env: {},
    ttlSeconds: 900,
    idleTimeoutSeconds: 0,
    metadata: {},
    createdAt: new Date(),
    ...over,
  };
}

export function testBackend(
  config: RuntimeConfig,
  clients: KubeClients,
  overrides: KubernetesBackendOverrides = {},
  /** the process role (runtime/config/role.ts); default all */
  role?: Role,
): KubernetesBackend {
  const logger = process.env.SBX_TEST_LOG ? createLogger({ level: process.env.SBX_TEST_LOG }) : silentLogger();
  return createKubernetesBackend(
    config,
    { logger, clock: systemClock, role },
    { clients, retryPeriodMs: 500, leaseDurationMs: 4000, activityFlushMs: 500, ...overrides },
  );
}

export { RbacAuthorizationV1Api };
export type { V1Pod };
