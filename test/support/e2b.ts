// The service with its E2B layer, wired as startService wires it, for tests that build their own
// Manager (a restarted state dir, replicas on one test cluster) and move the layer's clock.
import type { RuntimeConfig } from "../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../runtime/core/clock.ts";
import type { Logger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { type E2bLayer, e2bOptionsFor, registerE2b } from "../../runtime/server/e2b/plugin.ts";
import { testTokens } from "./local.ts";

/** A clock `skew.ms` ahead of the system's: the layer's idea of now, moved by the test. */
export function skewedClock(): { skew: { ms: number }; clock: Clock } {
  const skew = { ms: 0 };
  return { skew, clock: { now: () => new Date(Date.now() + skew.ms), sleep: systemClock.sleep } };
}

/** The app with the layer on `clock` (no sweeper), the Manager started, listening on loopback. */
export async function serveWithE2b(config: RuntimeConfig, manager: SandboxManager, logger: Logger, clock: Clock) {
  const app = buildApp({ manager, tokens: testTokens(), logger, e2b: false });
  const layer: Promise<E2bLayer> = registerE2b(app, {
    ...e2bOptionsFor(config),
    manager,
    tokens: testTokens(),
    logger,
    clock,
    sweepIntervalMs: 0,
  });
  await manager.start({ reaper: false });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return { app, url, layer: await layer };
}
