// Process-level wiring of the service, separate from main so tests can start the real thing
// on port 0: build backend + manager + app, start, listen; close() drains and stops it all.
import type { FastifyInstance } from "fastify";
import { buildManager } from "../backends.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxManager } from "../core/manager.ts";
import type { Backend } from "../core/types.ts";
import type { SnapshotGc } from "../snapshot/gc.ts";
import { buildApp, type Authenticator } from "./app.ts";
import type { ServerLimits } from "./routes.ts";

export interface ServiceOptions {
  config: RuntimeConfig;
  tokens: Authenticator;
  logger: Logger;
  clock: Clock;
  /** an already built backend (tests); default: the one config.platform names */
  backend?: Backend;
  host?: string;
  port?: number;
  limits?: Partial<ServerLimits>;
  reaperIntervalMs?: number;
  /** how long close() lets in-flight requests (streams) finish before cutting them */
  drainMs?: number;
  /** garbage collection of the snapshot registry (the embedded one, runtime/main.ts) */
  snapshotGc?: SnapshotGc;
}

export interface Service {
  url: string;
  app: FastifyInstance;
  manager: SandboxManager;
  close(): Promise<void>;
}

export async function startService(opts: ServiceOptions): Promise<Service> {
  const { manager } = await buildManager(opts.config, {
    logger: opts.logger,
    clock: opts.clock,
    backend: opts.backend,
    processMetrics: true,
    reaperIntervalMs: opts.reaperIntervalMs,
    snapshotGc: opts.snapshotGc,
  });
  let ready = false;
  const app = buildApp({
    manager,
    tokens: opts.tokens,
    logger: opts.logger,
    metrics: manager.metrics.registry,
    ready: () => ready,
    limits: opts.limits,
  });
  await manager.start();
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
  return { url, app, manager, close };
}
