// Process-level wiring of the service, separate from main so tests can start the real thing
// on port 0: build backend + manager + app, start, listen; close() drains and stops it all.
// The role (runtime/config/role.ts) decides which half runs: the manager serves the API and
// takes no Lease; the controller campaigns and reaps and serves only probes and metrics.
import type { FastifyInstance } from "fastify";
import { buildManager } from "../backends.ts";
import { describeRole, planRole, type Role, validateRoleForPlatform } from "../config/role.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxManager } from "../core/manager.ts";
import type { Platform } from "../platform.ts";
import type { SnapshotGc } from "../snapshot/gc.ts";
import { type Authenticator, buildApp } from "./app.ts";
import { e2bOptionsFor } from "./e2b/plugin.ts";
import { portOptionsFrom } from "./ports/service.ts";
import type { ServerLimits } from "./routes.ts";

export interface ServiceOptions {
  config: RuntimeConfig;
  tokens: Authenticator;
  logger: Logger;
  clock: Clock;
  /** an already built platform (tests); default: the one config.platform names */
  platform?: Platform;
  host?: string;
  port?: number;
  limits?: Partial<ServerLimits>;
  reaperIntervalMs?: number;
  /** how long close() lets in-flight requests (streams) finish before cutting them */
  drainMs?: number;
  /** garbage collection of the snapshot registry (the embedded one, runtime/main.ts) */
  snapshotGc?: SnapshotGc;
  /** which half of the runtime this process runs; default all (both) */
  role?: Role;
  /** this replica's name, the Lease holder (POD_NAME in a Deployment); default a random one */
  identity?: string;
}

export interface Service {
  url: string;
  app: FastifyInstance;
  manager: SandboxManager;
  role: Role;
  close(): Promise<void>;
}

// Over 60 lines on purpose: process wiring in start order (manager, app, listen) with close() undoing it in reverse.
export async function startService(opts: ServiceOptions): Promise<Service> {
  const role = opts.role ?? "all";
  validateRoleForPlatform(role, opts.config.platform);
  const plan = planRole(role);
  const { manager } = await buildManager(opts.config, {
    logger: opts.logger,
    clock: opts.clock,
    platform: opts.platform,
    processMetrics: true,
    reaperIntervalMs: opts.reaperIntervalMs,
    snapshotGc: opts.snapshotGc,
    role,
    identity: opts.identity,
  });
  let ready = false;
  const app = buildApp({
    manager,
    tokens: opts.tokens,
    logger: opts.logger,
    metrics: manager.metrics.registry,
    ready: () => ready,
    limits: opts.limits,
    api: plan.api,
    e2b: e2bOptionsFor(opts.config),
    ports: portOptionsFrom(opts.config),
  });
  // Ready once started: the informers have listed (backend.start). A standby controller is
  // ready too: it is healthy and waiting for the Lease, and a rollout must not wait for it to lead.
  // The reaper runs in every role for the budget reconcile; whether it deletes is the role's (buildManager).
  await manager.start({ maintenance: plan.maintenance, recover: plan.maintenance });
  try {
    await app.listen({ host: opts.host ?? opts.config.listen.host, port: opts.port ?? opts.config.listen.port });
  } catch (err) {
    await manager.close();
    const e = err as NodeJS.ErrnoException;
    if (e.code === "EADDRINUSE") {
      throw new Error(
        `port ${opts.port ?? opts.config.listen.port} is in use: stop what listens there, or set SBX_PORT (or listen.port in SBX_CONFIG)`,
        { cause: err },
      );
    }
    throw err;
  }
  ready = true;
  opts.logger.info({ op: "start", role, runs: describeRole(role), backend: manager.backendName }, `role ${role}`);
  const addr = app.server.address();
  const host = opts.host ?? opts.config.listen.host;
  const port = typeof addr === "object" && addr ? addr.port : opts.config.listen.port;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      ready = false;
      const cut = setTimeout(() => {
        opts.logger.warn({ op: "shutdown" }, "in-flight requests did not finish in time; closing their connections");
        app.server.closeAllConnections();
      }, opts.drainMs ?? 10_000);
      try {
        await app.close();
      } finally {
        clearTimeout(cut);
      }
      await manager.close();
      opts.logger.info({ op: "shutdown" }, "service stopped");
    })());
  return { url, app, manager, role, close };
}
