// Shared setup for the local backend tests: a real backend on a fresh state directory.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import { type RuntimeConfig, type RuntimeConfigInput, validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { type Clock, systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { Backend, ExecRequest, SandboxSpec } from "../../runtime/core/types.ts";
import { createLocalBackend } from "../../runtime/local/backend.ts";

export interface Harness {
  backend: Backend;
  config: RuntimeConfig;
  stateDir: string;
}

/** A short state dir: unix socket paths inside it must stay under 108 bytes. */
export function tempStateDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "sbxl-"));
}

export function localConfig(stateDir: string, extra: Partial<RuntimeConfigInput> = {}): RuntimeConfig {
  return validateRuntimeConfig({
    local: { stateDir },
    sizeClasses: {
      nano: {
        cpuRequest: "100m",
        cpuLimit: "1",
        memoryRequest: "64Mi",
        memoryLimit: "512Mi",
        workspace: "1Gi",
        tmp: "64Mi",
        pids: 128,
      },
      tiny: {
        cpuRequest: "100m",
        cpuLimit: "500m",
        memoryRequest: "32Mi",
        memoryLimit: "64Mi",
        workspace: "256Mi",
        tmp: "16Mi",
        pids: 48,
      },
    },
    ...extra,
  });
}

export async function startBackend(
  opts: { stateDir?: string; clock?: Clock; config?: Partial<RuntimeConfigInput> } = {},
): Promise<Harness> {
  const stateDir = opts.stateDir ?? tempStateDir();
  const config = localConfig(stateDir, opts.config);
  const backend = createLocalBackend(config, { logger: silentLogger(), clock: opts.clock ?? systemClock });
  await backend.start();
  return { backend, config, stateDir };
}

let seq = 0;
export function spec(
  config: RuntimeConfig,
  over: Partial<SandboxSpec> & { sizeName?: string; clock?: Clock } = {},
): SandboxSpec {
  const { sizeName = "nano", clock = systemClock, ...rest } = over;
  return {
    id: `t${process.pid}-${++seq}`,
    owner: "tester",
    image: { profile: "base", image: "host" },
    size: config.sizeClasses[sizeName],
    env: {},
    ttlSeconds: 600,
    idleTimeoutSeconds: 0,
    metadata: {},
    createdAt: clock.now(),
    ...rest,
  };
}

export async function createReady(h: Harness, over: Parameters<typeof spec>[1] = {}): Promise<string> {
  const s = spec(h.config, over);
  await h.backend.provision(s);
  await h.backend.awaitReady(s.id, { timeoutMs: 10_000 });
  return s.id;
}

export async function collect(s: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks).toString();
}

/** Runs a command to completion and returns its output and result. */
export async function run(
  backend: Backend,
  id: string,
  command: string[] | string,
  extra: Omit<ExecRequest, "command"> = {},
) {
  const argv = typeof command === "string" ? ["sh", "-c", command] : command;
  const s = await backend.exec(id, { command: argv, ...extra });
  const [stdout, stderr, result] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
  return { stdout, stderr, ...result };
}

/** Host pids whose real uid is in [lo, hi). */
export function processesWithUidIn(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const m = /\nUid:\s+(\d+)/.exec(fs.readFileSync(`/proc/${name}/status`, "utf8"));
      if (m && Number(m[1]) >= lo && Number(m[1]) < hi) out.push(Number(name));
    } catch {
      // exited while we looked
    }
  }
  return out;
}
