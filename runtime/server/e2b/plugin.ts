// The E2B-compatible layer: registerE2b(app, deps) adds E2B's control-plane REST routes and the
// envd routes to the service's fastify app, on the same port. Its own encapsulated context gives
// the REST routes E2B's auth (X-API-KEY) and E2B's error body without touching our /v1 API.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type Authenticator, type Identity, identify } from "../../auth/identities.ts";
import { TokenRejectedError } from "../../auth/jwt.ts";
import type { RuntimeConfig } from "../../config/schema.ts";
import { type Clock, systemClock } from "../../core/clock.ts";
import { NotFoundError, UnauthenticatedError, ValidationError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Manager } from "../../core/types.ts";
import { accessTokenMatches, type EnvdAccess, e2bError } from "./access.ts";
import { tokenOwner } from "./accessToken.ts";
import { registerEnvd } from "./envd/plugin.ts";
import { e2bErrorHandler } from "./errors.ts";
import { type E2bManager, Lifecycle } from "./lifecycle.ts";
import { registerRoutes } from "./routes.ts";
import { RESERVED } from "./shape.ts";
import { TimeoutSweeper } from "./sweeper.ts";
import { VerifiedTokens } from "./verifiedTokens.ts";

export interface E2bOptions {
  /** the hard TTL of E2B sandboxes: config.defaults.maxTtlSeconds (default 86400, E2B's own maximum) */
  maxTtlSeconds?: number;
  /** host-routing domain (`49983-<id>.<domain>` reaches envd); absent: clients set E2B_SANDBOX_URL */
  domain?: string;
  clock?: Clock;
  /** how often the timeout sweeper runs; 0 = only when a test calls it (default 5000) */
  sweepIntervalMs?: number;
  /** how long create/connect wait for a sandbox to accept commands (default 120000) */
  readyTimeoutMs?: number;
}

/**
 * The layer's options from the service's config. No state of its own: everything it keeps per
 * sandbox is in the sandbox's reserved metadata (shape.ts RESERVED), so in its durable record.
 */
export function e2bOptionsFor(config: RuntimeConfig): E2bOptions {
  return { maxTtlSeconds: config.defaults.maxTtlSeconds };
}

export interface E2bDepsIn extends E2bOptions {
  manager: Manager;
  /** the service's authenticator: static keys and, with identify, JWTs from config.auth.issuers */
  tokens: Authenticator;
  logger: Logger;
}

/** What tests and the service reach after registration. */
export interface E2bLayer {
  access: EnvdAccess;
  sweeper: TimeoutSweeper;
}

function presentedKey(req: FastifyRequest): string | undefined {
  const key = req.headers["x-api-key"];
  if (typeof key === "string" && key.length > 0) return key;
  // opts.apiHeaders can carry a bearer token instead
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return m?.[1];
}

/**
 * envd's access check: the sandbox's stored token hashes against the presented token, in
 * constant time; a token already verified against the same hashes skips the hashing
 * (verifiedTokens.ts). The Manager lookup stays on every request: it is what says the sandbox
 * still exists and is the token owner's, and it is an in-memory read on both platforms.
 */
export function envdAccess(manager: Manager, verified = new VerifiedTokens()): EnvdAccess {
  return {
    async resolve(sandboxId, accessToken) {
      const owner = tokenOwner(accessToken);
      if (!owner || accessToken === undefined) return undefined;
      let metadata: Record<string, string>;
      try {
        metadata = (await manager.get(owner, sandboxId)).metadata;
      } catch (err) {
        if (err instanceof NotFoundError) {
          verified.forget(sandboxId);
          return undefined;
        }
        throw err;
      }
      const createdHash = metadata[RESERVED.tokenHash];
      const mintedHash = metadata[RESERVED.connectTokenHash];
      const stored = `${createdHash ?? ""}:${mintedHash ?? ""}`;
      if (verified.known(sandboxId, accessToken, stored)) return { owner, sandboxId };
      // both are compared, whichever matches: no early exit on the first
      const created = accessTokenMatches(accessToken, createdHash);
      const minted = accessTokenMatches(accessToken, mintedHash);
      if (!created && !minted) return undefined;
      verified.remember(sandboxId, accessToken, stored);
      return { owner, sandboxId };
    },
  };
}

/** The layer keeps its state in sandbox metadata and sweeps every owner: it needs both Manager calls. */
function e2bManager(m: Manager): E2bManager {
  if (!m.updateMetadata || !m.listMarked)
    throw new ValidationError(
      "manager",
      m.constructor?.name,
      "the E2B layer needs a Manager with updateMetadata and listMarked (the service's SandboxManager)",
    );
  return m as E2bManager;
}

/**
 * Registers the layer. Resolves with its parts once fastify has loaded the plugin (app.ready()).
 * The returned promise is for tests; the service only awaits app.ready().
 */
export function registerE2b(app: FastifyInstance, deps: E2bDepsIn): Promise<E2bLayer> {
  let resolveLayer!: (l: E2bLayer) => void;
  const layer = new Promise<E2bLayer>((r) => (resolveLayer = r));
  app.register(async (scope) => {
    const clock = deps.clock ?? systemClock;
    const manager = e2bManager(deps.manager);
    const access = envdAccess(manager);
    const sweeper = new TimeoutSweeper({
      manager,
      clock,
      logger: deps.logger,
      intervalMs: deps.sweepIntervalMs ?? 5000,
    });
    const lifecycle = new Lifecycle({
      manager,
      clock,
      logger: deps.logger,
      maxTtlSeconds: deps.maxTtlSeconds ?? 86_400,
      readyTimeoutMs: deps.readyTimeoutMs ?? 120_000,
      domain: deps.domain,
    });
    await scope.register(async (rest) => {
      rest.setErrorHandler(e2bErrorHandler(deps.logger));
      rest.addHook("onRequest", async (req: FastifyRequest, reply: FastifyReply) => {
        const apiKey = presentedKey(req);
        let who: Identity;
        try {
          if (apiKey === undefined) throw new UnauthenticatedError();
          who = await identify(deps.tokens, apiKey);
        } catch (err) {
          if (!(err instanceof UnauthenticatedError)) throw err;
          // a refused JWT's message names the failed check; a wrong static key gets E2B's wording
          const message =
            err instanceof TokenRejectedError
              ? err.message
              : "missing or invalid API key: send X-API-KEY: <key> (E2B_API_KEY for the SDK)";
          return e2bError(reply, 401, message);
        }
        const owner = who.owner;
        req.owner = owner;
        req.identity = who;
        req.e2bCaller = { owner, apiKey, ...(who.team !== undefined ? { team: who.team } : {}) };
      });
      registerRoutes(rest, { manager, lifecycle, domain: deps.domain });
    });
    await scope.register(async (envd) => registerEnvd(envd, { manager, access, logger: deps.logger }));
    scope.addHook("onReady", async () => sweeper.start());
    scope.addHook("onClose", async () => sweeper.stop());
    resolveLayer({ access, sweeper });
  });
  return layer;
}
