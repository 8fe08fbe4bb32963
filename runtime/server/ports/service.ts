// Port traffic on the main app (docs/ports.md): requests for /v1/sandboxes/{id}/ports/{port}/...
// and for hosts {port}-{id}.{domain} are taken over in the first hook, before routing and body
// parsing, and relayed into the sandbox; upgrades (websockets) arrive on the server's 'upgrade'
// event. Who may pass: the owner's bearer token, or the port's own access (public, per-port token).
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type Authenticator, ownerOf } from "../../auth/identities.ts";
import type { RuntimeConfig } from "../../config/schema.ts";
import type { Clock } from "../../core/clock.ts";
import { HTTP_STATUS, NotFoundError, SbxError, UnauthenticatedError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Manager } from "../../core/types.ts";
import { errorBody } from "../requestErrors.ts";
import { FilePortAccessStore, type PortAccessStore, tokenMatches } from "./access.ts";
import { PortConnector, WakeHoldExpired } from "./connector.ts";
import { type ForwardInfo, forwardHttp, forwardTunnel, forwardUpgrade, rawAnswer, TUNNEL_UPGRADE } from "./forward.ts";
import { MetadataPortAccessStore } from "./metadataAccess.ts";
import { hostTarget, type PortTarget, pathTarget } from "./target.ts";

export interface PortOptions {
  /** host form {port}-{id}.{domain} (config ports.domain); unset: path form only */
  domain?: string;
  /** longest a request to a paused sandbox is held while it wakes (config ports.wakeHoldSeconds) */
  wakeHoldMs?: number;
  /** after a wake, how long a refused connect is retried (config ports.connectRetrySeconds) */
  connectRetryMs?: number;
  /** how often an open stream re-touches activity */
  leaseTouchMs?: number;
  /** where exposures are kept (survive a restart); unset: in memory */
  accessDir?: string;
  /** keep exposures in the sandbox's metadata instead (shared by replicas; Kubernetes) */
  accessInMetadata?: boolean;
  /** the clock of the hold bound and the lease (default: the service's) */
  clock?: Clock;
}

/**
 * The service's port options from its config. Exposures live where the sandbox's record does: the
 * local state dir on the local platform, the Sandbox resource's metadata on Kubernetes.
 */
export function portOptionsFrom(config: RuntimeConfig): PortOptions {
  return {
    domain: config.ports.domain,
    wakeHoldMs: config.ports.wakeHoldSeconds * 1000,
    connectRetryMs: config.ports.connectRetrySeconds * 1000,
    accessDir: config.platform === "local" ? join(config.local.stateDir, "port-access") : undefined,
    accessInMetadata: config.platform === "kubernetes",
  };
}

export const DEFAULT_PORT_OPTIONS = { wakeHoldMs: 30_000, connectRetryMs: 10_000, leaseTouchMs: 1000 };

export interface PortServiceDeps {
  manager: Manager;
  tokens: Authenticator;
  logger: Logger;
  clock: Clock;
}

function bearerOf(h: string | string[] | undefined): string | undefined {
  if (typeof h !== "string") return undefined;
  return /^Bearer\s+(\S+)\s*$/i.exec(h)?.[1];
}

export class PortService {
  readonly access: PortAccessStore;
  readonly connector: PortConnector;
  readonly domain?: string;
  /** relayed sockets still open: an upgraded one is no longer the HTTP server's to close */
  private readonly open = new Set<Duplex>();

  constructor(
    private readonly deps: PortServiceDeps,
    opts: PortOptions = {},
  ) {
    this.domain = opts.domain;
    this.access = opts.accessInMetadata
      ? new MetadataPortAccessStore(deps.manager)
      : new FilePortAccessStore(opts.accessDir);
    this.connector = new PortConnector({
      manager: deps.manager,
      clock: opts.clock ?? deps.clock,
      logger: deps.logger,
      wakeHoldMs: opts.wakeHoldMs ?? DEFAULT_PORT_OPTIONS.wakeHoldMs,
      connectRetryMs: opts.connectRetryMs ?? DEFAULT_PORT_OPTIONS.connectRetryMs,
      leaseTouchMs: opts.leaseTouchMs ?? DEFAULT_PORT_OPTIONS.leaseTouchMs,
    });
  }

  now(): Date {
    return this.deps.clock.now();
  }

  /** The target of a request, or undefined when it is an ordinary API request. */
  targetOf(req: IncomingMessage): PortTarget | undefined {
    const url = req.url ?? "/";
    return hostTarget(req.headers.host, url, this.domain) ?? pathTarget(url);
  }

  register(app: FastifyInstance): void {
    app.addHook("onRequest", async (req, reply) => {
      const target = this.targetOf(req.raw);
      if (target) await this.relayHttp(req, reply, target);
    });
    app.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", () => socket.destroy());
      void this.relayUpgrade(req, socket, head, app);
    });
    // preClose, not onClose: fastify's own onClose closes the HTTP server, which waits for every
    // connection, and a relayed one ends only when we end it
    app.addHook("preClose", async () => {
      for (const s of this.open) s.destroy();
    });
  }

  /** Who the request acts for, and whether its Authorization header was our credential. */
  async authorize(req: IncomingMessage, target: PortTarget): Promise<{ owner: string; dropAuthorization: boolean }> {
    const presented = bearerOf(req.headers.authorization);
    const owner = presented ? await ownerOf(this.deps.tokens, presented) : undefined;
    const access = await this.access.get(target.id, target.port, owner);
    // a public port's own Authorization header (the app's) passes through, unless it was ours
    if (access?.public) return { owner: access.owner, dropAuthorization: owner !== undefined };
    if (owner) return { owner, dropAuthorization: true };
    if (access && tokenMatches(access, target.queryToken)) return { owner: access.owner, dropAuthorization: false };
    if (access && tokenMatches(access, presented)) return { owner: access.owner, dropAuthorization: true };
    throw new UnauthenticatedError(
      `port ${target.port} of sandbox ${JSON.stringify(target.id)}: missing or invalid token: send the owner's Authorization: Bearer <token>, or the port's access token (Bearer, or ?sbx_token=); the owner can open the port with sbx expose ${target.id} ${target.port} [--public]`,
    );
  }

  private async connect(
    req: IncomingMessage,
    target: PortTarget,
  ): Promise<{ up: Duplex; info: ForwardInfo; owner: string }> {
    const { owner, dropAuthorization } = await this.authorize(req, target);
    try {
      const up = await this.connector.connect(owner, target.id, target.port);
      return { up, owner, info: { target, dropAuthorization } };
    } catch (err) {
      // an exposure of a sandbox that is gone is dropped; the answer stays the 404
      if (err instanceof NotFoundError) void this.access.forget(target.id).catch(() => undefined);
      throw err;
    }
  }

  private async relayHttp(req: FastifyRequest, reply: FastifyReply, target: PortTarget): Promise<void> {
    let conn: Awaited<ReturnType<PortService["connect"]>>;
    try {
      conn = await this.connect(req.raw, target);
    } catch (err) {
      if (!(err instanceof WakeHoldExpired)) throw err; // the app's error handler answers
      reply.header("retry-after", String(err.retryAfterSeconds));
      return reply
        .code(503)
        .type("application/json")
        .send(errorBody(err.code, err.message, err.details));
    }
    reply.hijack();
    const { up, owner, info } = conn;
    this.open.add(up);
    const release = this.connector.lease(owner, target.id);
    try {
      await forwardHttp(req.raw, reply.raw, up, info, (status, message) => {
        reply.raw.writeHead(status, { "content-type": "application/json" });
        reply.raw.end(JSON.stringify(errorBody("upstream", message, { id: target.id, port: target.port })));
      });
    } catch (err) {
      // hijacked: the app's error handler can no longer answer, so the exchange is cut and logged
      this.deps.logger.error({ op: "port", sandbox: target.id, port: target.port, err }, "relaying a request failed");
      reply.raw.destroy();
      up.destroy();
    } finally {
      this.open.delete(up);
      release();
    }
  }

  private async relayUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, app: FastifyInstance) {
    let target: PortTarget | undefined;
    try {
      target = this.targetOf(req);
      if (!target) {
        // another upgrade handler (a later feature) may own this path; alone, we refuse it
        if (app.server.listenerCount("upgrade") === 1)
          rawAnswer(socket, 404, errorBody("not_found", `no upgrade route ${JSON.stringify(req.url)}`));
        return;
      }
      const { up, owner, info } = await this.connect(req, target);
      this.open.add(up).add(socket);
      const release = this.connector.lease(owner, target.id);
      if (String(req.headers.upgrade).toLowerCase() === TUNNEL_UPGRADE) await forwardTunnel(socket, head, up);
      else
        await forwardUpgrade(req, socket, head, up, info, (err) => {
          // a refusal reported after the relay opened (Kubernetes) gets the answer an open's would
          if (!(err instanceof SbxError)) return false;
          rawAnswer(socket, HTTP_STATUS[err.code], errorBody(err.code, err.message, err.details));
          return true;
        });
      this.open.delete(up);
      this.open.delete(socket);
      release();
    } catch (err) {
      if (err instanceof SbxError) {
        const headers: Record<string, string> = {};
        if (err instanceof WakeHoldExpired) headers["retry-after"] = String(err.retryAfterSeconds);
        const status = err instanceof WakeHoldExpired ? 503 : HTTP_STATUS[err.code];
        return rawAnswer(socket, status, errorBody(err.code, err.message, err.details), headers);
      }
      this.deps.logger.error({ op: "port", sandbox: target?.id, err }, "relaying an upgrade failed");
      rawAnswer(socket, 500, errorBody("internal", "internal error; the service logged the details"));
    }
  }
}
