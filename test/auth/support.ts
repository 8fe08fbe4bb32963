// The service with JWT issuers, in-process: the real local runtime's Manager, the real app, an
// Identities over the suite's static tokens and the given issuers, and a clock the test moves.
import { buildIdentities, type Identities } from "../../runtime/auth/identities.ts";
import type { KeyTiming } from "../../runtime/auth/keys.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import type { Logger } from "../../runtime/core/log.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { type LocalRuntime, startLocalRuntime, testTokens } from "../support/local.ts";
import { type CapturedLog, captureLogger } from "../support/logs.ts";

export interface AuthApp {
  rt: LocalRuntime;
  app: ReturnType<typeof buildApp>;
  identities: Identities;
  logs: CapturedLog[];
  /** the clock Identities reads, in ms; tests move it */
  clock: { ms: number };
  close(): Promise<void>;
}

/** `runtime`: more of the runtime's config (budget, tenancy), for the issuers and the runtime alike. */
export async function startAuthApp(
  issuers: unknown[],
  timing: Partial<KeyTiming> = {},
  runtime: Record<string, unknown> = {},
): Promise<AuthApp> {
  const config = validateRuntimeConfig({ ...runtime, auth: { issuers } });
  const clock = { ms: Date.now() };
  const { logger, lines } = captureLogger();
  const identities = buildIdentities(config, testTokens(), {
    now: () => clock.ms,
    logger: logger as Logger,
    timing,
  });
  const rt = await startLocalRuntime(runtime);
  const app = buildApp({ manager: rt.manager, tokens: identities, logger: logger as Logger });
  await app.ready();
  return {
    rt,
    app,
    identities,
    logs: lines,
    clock,
    close: async () => {
      await app.close();
      await rt.close();
    },
  };
}

/** An issuer entry for a test issuer at url: plain http on loopback, audience sbx. */
export function issuerEntry(name: string, url: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return { name, issuer: url, audiences: ["sbx"], allowInsecureHttp: true, fetchTimeoutMs: 500, ...over };
}
