// Shared set-up of the port relay tests: the real runtime on the real local backend, listening on
// a real socket (a relay is about sockets: inject cannot upgrade), with the port options the test
// wants; and a sandbox running test/server/fixtures/port-server.py.
import { readFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { buildManager } from "../../runtime/backends.ts";
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { buildApp } from "../../runtime/server/app.ts";
import type { PortOptions } from "../../runtime/server/ports/service.ts";
import { auth, localConfig, parseExecFrames, type TOKENS, testTokens } from "../support/local.ts";

export const SERVER_PY = readFileSync(join(import.meta.dirname, "fixtures/port-server.py"));

export interface PortRuntime {
  url: string;
  port: number;
  stateDir: string;
  manager: SandboxManager;
  app: ReturnType<typeof buildApp>;
  stop(): Promise<void>;
  close(): Promise<void>;
}

export async function startPortRuntime(
  input: RuntimeConfigInput = {},
  opts: { ports?: PortOptions; clock?: Clock; stateDir?: string } = {},
): Promise<PortRuntime> {
  const made = localConfig(input);
  const config = opts.stateDir ? { ...made.config, local: { stateDir: opts.stateDir } } : made.config;
  const stateDir = config.local.stateDir;
  const logger = silentLogger();
  const clock = opts.clock ?? systemClock;
  const platform = createLocalPlatform(config, { logger, clock });
  const { manager } = await buildManager(config, { logger, clock, platform });
  const app = buildApp({
    manager,
    tokens: testTokens(),
    logger,
    metrics: manager.metrics.registry,
    ports: { accessDir: join(stateDir, "port-access"), clock, ...opts.ports },
    e2b: false,
  });
  await manager.start({ reaper: false });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  const stop = async () => {
    await app.close();
    await manager.close();
  };
  return {
    url,
    port: Number(new URL(url).port),
    stateDir,
    manager,
    app,
    stop,
    close: async () => {
      await stop();
      if (!opts.stateDir) made.cleanup();
    },
  };
}

export async function api(
  rt: Pick<PortRuntime, "url">,
  method: string,
  path: string,
  body?: unknown,
  owner: keyof typeof TOKENS = "alice",
) {
  const res = await fetch(`${rt.url}${path}`, {
    method,
    headers: { ...auth(owner), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text), headers: res.headers };
}

export async function sh(rt: Pick<PortRuntime, "url">, id: string, script: string, stdin?: Buffer): Promise<string> {
  const res = await api(rt, "POST", `/v1/sandboxes/${id}/exec`, {
    command: ["sh", "-c", script],
    timeoutMs: 60_000,
    ...(stdin ? { stdin: stdin.toString("base64") } : {}),
  });
  const f = parseExecFrames(res.text);
  if (f.exit?.exitCode !== 0) throw new Error(`${script}: ${res.status} ${f.stderr} ${res.text.slice(0, 300)}`);
  return f.stdout;
}

/** A ready sandbox of alice's (extra create fields merged in). */
export async function sandbox(rt: Pick<PortRuntime, "url">, extra: Record<string, unknown> = {}): Promise<string> {
  const created = await api(rt, "POST", "/v1/sandboxes", { size: "nano", ...extra });
  if (created.status !== 201) throw new Error(`create: ${created.status} ${created.text}`);
  const id = created.json().id as string;
  const waited = await api(rt, "POST", `/v1/sandboxes/${id}/wait`, { timeoutSeconds: 60 });
  if (waited.status !== 200) throw new Error(`wait: ${waited.status} ${waited.text}`);
  return id;
}

/** The shell line that starts the fixture server on `port` in the background. */
export const START_SERVER = (port: number) => `nohup python3 /workspace/port-server.py ${port} >/tmp/server.log 2>&1 &`;

/** Copies the fixture server in, starts it and waits until it accepts on `port`. */
export async function startServer(rt: Pick<PortRuntime, "url">, id: string, port = 8000): Promise<void> {
  await sh(rt, id, "cat > /workspace/port-server.py", SERVER_PY);
  await sh(
    rt,
    id,
    `${START_SERVER(port)} for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}))" 2>/dev/null && exit 0; sleep 0.1; done; cat /tmp/server.log; exit 1`,
  );
}

/** The few parts of the `ws` client the port tests use (the package ships no types of its own). */
export interface WsClient {
  send(data: string | Buffer): void;
  close(): void;
  on(event: "message", fn: (data: Buffer) => void): WsClient;
  on(event: "error", fn: (err: Error) => void): WsClient;
  once(event: "open" | "close", fn: (...a: unknown[]) => void): WsClient;
  once(event: "unexpected-response", fn: (req: unknown, res: { statusCode?: number }) => void): WsClient;
}
export const WebSocket = createRequire(import.meta.url)("ws") as new (
  url: string,
  opts?: { headers?: Record<string, string> },
) => WsClient;

/** A GET with headers fetch will not send as given (Host), to the service on 127.0.0.1:`port`. */
export function rawGet(
  port: number,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/** A CLI run's streams (runCli's io) with what it printed, for the ports CLI tests. */
export function cliIo() {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = "";
  let err = "";
  stdout.on("data", (c) => (out += c));
  stderr.on("data", (c) => (err += c));
  return { io: { stdout, stderr, stdin: new PassThrough() }, out: () => out, err: () => err };
}
