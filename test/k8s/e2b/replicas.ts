// Service replicas on one test cluster, as prod runs several behind one URL: each with its own
// Kubernetes backend (identity), Manager and E2B layer, on its own loopback port. Shared by the
// E2B multi-replica tests (state.test.ts, processes.test.ts).
import { buildManager } from "../../../runtime/backends.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import type { E2bLayer } from "../../../runtime/server/e2b/plugin.ts";
import { serveWithE2b, skewedClock } from "../../support/e2b.ts";
import { TOKENS } from "../../support/local.ts";
import { adminClients, testKubeconfigPath, testPlatform } from "../runtime/support.ts";

export interface Replica {
  url: string;
  backend: KubernetesBackend;
  manager: SandboxManager;
  layer: E2bLayer;
  /** how far the layer's clock runs ahead of the system's, moved by the test */
  skew: { ms: number };
  leads(): boolean;
  /** as a killed process: stops serving, leaves every sandbox to the others */
  crash(): Promise<void>;
  close(): Promise<void>;
}

/** One service replica as startService wires it, with its own backend, identity and layer clock. */
export async function startReplica(config: RuntimeConfig, identity: string): Promise<Replica> {
  const logger = silentLogger();
  const platform = testPlatform(config, adminClients(await testKubeconfigPath()), { identity });
  const { backend } = platform;
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform, reaperIntervalMs: 60_000 });
  const { skew, clock } = skewedClock();
  const { app, url, layer } = await serveWithE2b(config, manager, logger, clock);
  let crashed = false;
  const stopServing = async () => {
    app.server.closeAllConnections();
    await app.close();
  };
  return {
    url,
    backend,
    manager,
    layer,
    skew,
    leads: () => platform.testing.controller.isLeader(),
    async crash() {
      crashed = true;
      await stopServing();
      await platform.testing.crash(); // killed: no drain, no goodbye
    },
    async close() {
      if (!crashed) await stopServing();
      // after a crash this only releases what the dead process left (timers, the lease)
      await manager.close().catch(() => undefined);
    },
  };
}

/** The SDK's options for alice: the control plane on `api`, envd on `envd`. */
export const sdkOptions = (api: Replica, envd: Replica = api) => ({
  apiKey: TOKENS.alice,
  apiUrl: api.url,
  sandboxUrl: envd.url,
  requestTimeoutMs: 150_000,
});
