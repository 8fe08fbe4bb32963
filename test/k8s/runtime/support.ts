// Helpers for the Kubernetes backend's integration tests: the kubeconfig of the control plane
// the suite started, the contract (CRD) installed, a fresh namespace pair per test file, and
// a backend built on top. The cluster fixtures live in tools/control-plane/fixtures.ts (the
// benchmarks use them too); they are re-exported here so tests import one module.
import { RbacAuthorizationV1Api, type V1Pod } from "@kubernetes/client-node";
import type { Role } from "../../../runtime/config/role.ts";
import type { RuntimeConfig, RuntimeConfigInput } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { createLogger, silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import {
  createKubernetesPlatform,
  type KubernetesBackend,
  type KubernetesBackendOverrides,
  type KubernetesPlatform,
} from "../../../runtime/kubernetes.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
} from "../../../tools/control-plane/fixtures.ts";

export { addSandboxNodes } from "../../../tools/control-plane/fixtures.ts";
export { adminClients, freshNamespaces, installSandboxCrd, type TestNamespaces, testConfig };

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

export function testPlatform(
  config: RuntimeConfig,
  clients: KubeClients,
  overrides: KubernetesBackendOverrides = {},
  /** the process role (runtime/config/role.ts); default all */
  role?: Role,
): KubernetesPlatform {
  const logger = process.env.SBX_TEST_LOG ? createLogger({ level: process.env.SBX_TEST_LOG }) : silentLogger();
  return createKubernetesPlatform(
    config,
    { logger, clock: systemClock, role },
    { clients, retryPeriodMs: 500, leaseDurationMs: 4000, activityFlushMs: 500, ...overrides },
  );
}

export type { V1Pod };
export { RbacAuthorizationV1Api };

/** What every k8s test file starts from: admin clients, the CRD installed, its own namespaces, their config. */
export interface TestCluster {
  kubeconfig: string;
  clients: KubeClients;
  ns: TestNamespaces;
  config: RuntimeConfig;
}

/** A config override, or a function of the namespaces (e.g. for a snapshot repository named after them). */
export type TestConfigOverride = Partial<RuntimeConfigInput> | ((ns: TestNamespaces) => Partial<RuntimeConfigInput>);

/** `prefix` names the namespace pair (freshNamespaces); `over` is merged into the test config. */
export async function prepareTestCluster(prefix: string, over: TestConfigOverride = {}): Promise<TestCluster> {
  const kubeconfig = await testKubeconfigPath();
  const clients = adminClients(kubeconfig);
  await installSandboxCrd(clients.kc);
  const ns = await freshNamespaces(clients.core, prefix);
  const config = testConfig(ns, typeof over === "function" ? over(ns) : over);
  return { kubeconfig, clients, ns, config };
}

export interface TestBackend extends TestCluster {
  platform: KubernetesPlatform;
  /** platform.backend */
  backend: KubernetesBackend;
  /** closes the backend, then deletes the namespaces */
  close(): Promise<void>;
}

export interface TestBackendOptions {
  /** runs before the backend starts, e.g. to subscribe to its events from the first one */
  beforeStart?: (backend: KubernetesBackend) => void;
  /** wait until the backend leads (the default); off where the test waits for something that needs it anyway */
  awaitLeader?: boolean;
}

/**
 * The backend-level tests' beforeAll: a started backend (testBackend with `backendOverrides`) in
 * a fresh namespace pair, leading. If it cannot start, it is closed and the namespaces deleted
 * here, since the caller's afterAll never got a handle to close.
 */
export async function startTestBackend(
  prefix: string,
  over: TestConfigOverride = {},
  backendOverrides: KubernetesBackendOverrides = {},
  options: TestBackendOptions = {},
): Promise<TestBackend> {
  const cluster = await prepareTestCluster(prefix, over);
  const platform = testPlatform(cluster.config, cluster.clients, backendOverrides);
  const { backend } = platform;
  const close = async () => {
    await backend.close();
    await cluster.ns.cleanup();
  };
  try {
    options.beforeStart?.(backend);
    await backend.start();
    if (options.awaitLeader ?? true) {
      // loaded here: test/support/cluster.ts imports vitest, and manager-child.ts runs this module outside it
      const { waitFor } = await import("../../support/cluster.ts");
      await waitFor("leadership", async () => platform.testing.controller.isLeader(), 15_000);
    }
  } catch (err) {
    await close().catch((cleanup: unknown) => {
      throw new AggregateError([err, cleanup], `${prefix}: the test backend did not start, nor did its cleanup finish`);
    });
    throw err;
  }
  return { ...cluster, platform, backend, close };
}
