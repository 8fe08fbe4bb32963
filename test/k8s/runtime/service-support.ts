// The service as `npm start` wires it, on the Kubernetes backend against the suite's control
// plane, in a fresh namespace pair, its backend leading: what the service-level k8s tests (the
// HTTP API, E2B, abandoned streams) start in beforeAll. A separate module from support.ts, so
// the backend-level tests do not load the whole service.
import { Sandbox } from "e2b";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import type { KubernetesBackend, KubernetesBackendOverrides, KubernetesPlatform } from "../../../runtime/kubernetes.ts";
import { type Service, startService } from "../../../runtime/server/service.ts";
import { waitFor } from "../../support/cluster.ts";
import { TOKENS, testTokens } from "../../support/local.ts";
import { prepareTestCluster, type TestConfigOverride, type TestNamespaces, testPlatform } from "./support.ts";

export interface TestService {
  ns: TestNamespaces;
  clients: KubeClients;
  config: RuntimeConfig;
  platform: KubernetesPlatform;
  backend: KubernetesBackend;
  service: Service;
  /** closes the service (and its backend), then deletes the namespaces */
  close(): Promise<void>;
}

/**
 * Starts it on loopback with the suite's tokens. `over` is merged into the test config (a
 * function gets the namespaces, e.g. for a snapshot repository named after them).
 */
export async function startTestService(
  prefix: string,
  over: TestConfigOverride = {},
  /** the backend's test overrides (e.g. commandChannel) */
  backendOverrides: KubernetesBackendOverrides = {},
): Promise<TestService> {
  const { clients, ns, config } = await prepareTestCluster(prefix, (ns) => ({
    listen: { host: "127.0.0.1", port: 0 },
    ...(typeof over === "function" ? over(ns) : over),
  }));
  const platform = testPlatform(config, clients, backendOverrides);
  const service = await startService({
    config,
    tokens: testTokens(),
    logger: silentLogger(),
    clock: systemClock,
    platform,
    host: "127.0.0.1",
    port: 0,
    reaperIntervalMs: 60_000,
  });
  await waitFor("leader", async () => platform.testing.controller.isLeader(), 15_000);
  return {
    ns,
    clients,
    config,
    platform,
    backend: platform.backend,
    service,
    close: async () => {
      await service.close();
      await ns.cleanup();
    },
  };
}

/** A test service with one sandbox the real E2B SDK created on it, as the E2B files need it. */
export interface E2bOnService {
  service: Service;
  sbx: Sandbox;
  /** kills the sandbox, closes the service, deletes the namespaces: for afterAll */
  close(): Promise<void>;
}

export async function startE2bSandbox(prefix: string): Promise<E2bOnService> {
  const t = await startTestService(prefix);
  const sbx = await Sandbox.create("base", {
    apiKey: TOKENS.alice,
    apiUrl: t.service.url,
    sandboxUrl: t.service.url,
    requestTimeoutMs: 150_000,
    timeoutMs: 600_000,
  }).catch(async (err: unknown) => {
    await t.service.close();
    await t.ns.cleanup();
    throw err;
  });
  return {
    service: t.service,
    sbx,
    close: async () => {
      await sbx.kill().catch(() => undefined);
      await t.service.close();
      await t.ns.cleanup();
    },
  };
}
