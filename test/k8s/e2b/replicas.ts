// Service replicas on one test cluster, as prod runs several behind one URL: each with its own
// Kubernetes backend (identity), Manager and E2B layer, on its own loopback port. Shared by the
// E2B multi-replica tests (state.test.ts, processes.test.ts).
import { buildManager } from "../../../runtime/backends.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { buildApp } from "../../../runtime/server/app.ts";
import { e2bOptionsFor, type E2bLayer, registerE2b } from "../../../runtime/server/e2b/plugin.ts";
import { TOKENS, testTokens } from "../../support/local.ts";
import { adminClients, testBackend, testKubeconfigPath } from "../runtime/support.ts";

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

/** A clock `skew.ms` ahead of the system's: a replica's layer's idea of now, moved by the test. */
function skewedClock(): { skew: { ms: number }; clock: Clock } {
  const skew = { ms: 0 };
  return { skew, clock: { now: () => new Date(Date.now() + skew.ms), sleep: systemClock.sleep } };
}

/** One service replica as startService wires it, with its own backend, identity and layer clock. */
export async function startReplica(config: RuntimeConfig, identity: string): Promise<Replica> {
  const logger = silentLogger();
  const backend = testBackend(config, adminClients(await testKubeconfigPath()), { identity });
  const { manager } = await buildManager(config, { logger, clock: systemClock, backend, reaperIntervalMs: 60_000 });
  const app = buildApp({ manager, tokens: testTokens(), logger, e2b: false });
  const { skew, clock } = skewedClock();
  const layer = registerE2b(app, {
    ...e2bOptionsFor(config),
    manager,
    tokens: testTokens(),
    logger,
    clock,
    sweepIntervalMs: 0,
  });
  await manager.start({ reaper: false });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  let crashed = false;
  const stopServing = async () => {
    app.server.closeAllConnections();
    await app.close();
  };
  return {
    url,
    backend,
    manager,
    layer: await layer,
    skew,
    leads: () => backend.controller.isLeader(),
    async crash() {
      crashed = true;
      await stopServing();
      await backend.crash(); // killed: no drain, no goodbye
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
