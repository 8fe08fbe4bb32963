// Test support: the real runtime on the real LOCAL backend (bubblewrap sandboxes), in a
// temporary state directory, with two owners' tokens. No mocks: what the tests drive is what
// `npm start` runs.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildManager } from "../../runtime/backends.ts";
import { type RuntimeConfig, type RuntimeConfigInput, validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../runtime/core/clock.ts";
import { type Logger, silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { hashToken, TokenStore } from "../../runtime/core/tokens.ts";
import type { Backend } from "../../runtime/core/types.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { buildApp } from "../../runtime/server/app.ts";
import type { ServerLimits } from "../../runtime/server/routes.ts";
import type { TerminalOptions } from "../../runtime/server/terminal.ts";

export const TOKENS = { alice: "token-alice-0123456789", bob: "token-bob-0123456789" } as const;
export const auth = (owner: keyof typeof TOKENS) => ({ authorization: `Bearer ${TOKENS[owner]}` });

export function testTokens(): TokenStore {
  return new TokenStore(new Map(Object.entries(TOKENS).map(([owner, t]) => [hashToken(t), owner])));
}

export function localConfig(input: RuntimeConfigInput = {}): {
  config: RuntimeConfig;
  stateDir: string;
  cleanup: () => void;
} {
  const stateDir = mkdtempSync(join(tmpdir(), "sbx-test-"));
  const config = validateRuntimeConfig({ ...input, local: { stateDir }, listen: { host: "127.0.0.1", port: 0 } });
  return { config, stateDir, cleanup: () => rmSync(stateDir, { recursive: true, force: true }) };
}

export interface LocalRuntime {
  config: RuntimeConfig;
  stateDir: string;
  manager: SandboxManager;
  /** the platform's backend, under the Manager */
  backend: Backend;
  app: ReturnType<typeof buildApp>;
  /** close the app and the manager (which closes the backend); keeps the state dir */
  stop(): Promise<void>;
  /** stop and remove the state dir */
  close(): Promise<void>;
}

export async function startLocalRuntime(
  input: RuntimeConfigInput = {},
  opts: {
    stateDir?: string;
    clock?: Clock;
    logger?: Logger;
    reaper?: boolean;
    reaperIntervalMs?: number;
    limits?: Partial<ServerLimits>;
    terminals?: TerminalOptions;
  } = {},
): Promise<LocalRuntime> {
  const made = opts.stateDir ? undefined : localConfig(input);
  const stateDir = opts.stateDir ?? made!.stateDir;
  const config = made?.config ?? validateRuntimeConfig({ ...input, local: { stateDir } });
  const logger = opts.logger ?? silentLogger();
  const clock = opts.clock ?? systemClock;
  const platform = createLocalPlatform(config, { logger, clock });
  const { manager, backend } = await buildManager(config, {
    logger,
    clock,
    platform,
    reaperIntervalMs: opts.reaperIntervalMs,
  });
  const app = buildApp({
    manager,
    tokens: testTokens(),
    logger,
    metrics: manager.metrics.registry,
    limits: opts.limits,
    terminals: opts.terminals,
  });
  await manager.start({ reaper: opts.reaper ?? false });
  await app.ready();
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await app.close();
    await manager.close();
  };
  return {
    config,
    stateDir,
    manager,
    backend,
    app,
    stop,
    close: async () => {
      await stop();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** Parse an NDJSON exec response body into stdout, stderr and the final frame. */
export function parseExecFrames(body: string): {
  stdout: string;
  stderr: string;
  exit?: { exitCode: number; timedOut: boolean; oomKilled: boolean };
  error?: { code: string; message: string };
  frames: number;
} {
  let stdout = "";
  let stderr = "";
  let exit: { exitCode: number; timedOut: boolean; oomKilled: boolean } | undefined;
  let error: { code: string; message: string } | undefined;
  let frames = 0;
  for (const line of body.split("\n")) {
    if (!line) continue;
    frames++;
    const f = JSON.parse(line);
    if (f.stream === "stdout") stdout += Buffer.from(f.data, "base64").toString();
    else if (f.stream === "stderr") stderr += Buffer.from(f.data, "base64").toString();
    else if (f.exit) exit = f.exit;
    else if (f.error) error = f.error;
  }
  return { stdout, stderr, exit, error, frames };
}

/** Creates a sandbox through the API and waits until it is ready; returns its id (asserts 201 and 200). */
export async function createReadySandbox(
  rt: Pick<LocalRuntime, "app">,
  payload: Record<string, unknown> = { size: "nano" },
  owner: keyof typeof TOKENS = "alice",
): Promise<string> {
  const created = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth(owner), payload });
  if (created.statusCode !== 201) throw new Error(`create answered ${created.statusCode}: ${created.body}`);
  const id: string = created.json().id;
  const waited = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/wait`,
    headers: auth(owner),
    payload: { timeoutSeconds: 60 },
  });
  if (waited.statusCode !== 200) throw new Error(`wait for ${id} answered ${waited.statusCode}: ${waited.body}`);
  return id;
}

/** Creates a sandbox through the E2B REST surface (template "base"); asserts 201. */
export async function createE2bSandbox(
  rt: Pick<LocalRuntime, "app">,
  owner: keyof typeof TOKENS = "alice",
): Promise<{ id: string; envdAccessToken: string }> {
  const res = await rt.app.inject({
    method: "POST",
    url: "/v2/sandboxes",
    headers: { "x-api-key": TOKENS[owner] },
    payload: { templateID: "base" },
  });
  if (res.statusCode !== 201) throw new Error(`E2B create answered ${res.statusCode}: ${res.body}`);
  return { id: res.json().sandboxID, envdAccessToken: res.json().envdAccessToken };
}

/** Runs `sh -c script` in a sandbox through POST /v1/.../exec and parses the frames. */
export async function shIn(
  rt: Pick<LocalRuntime, "app">,
  id: string,
  script: string,
  owner: keyof typeof TOKENS = "alice",
): Promise<ReturnType<typeof parseExecFrames>> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth(owner),
    payload: { command: ["sh", "-c", script] },
  });
  return parseExecFrames(res.body);
}
