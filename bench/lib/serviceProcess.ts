// The service a benchmark measures, in this process or in a process of its own (as `npm start`
// runs it). A bench script that takes `--service child` re-runs itself with `--serve`: that
// child serves until its stdin closes and prints its URL as its first JSON line.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { hashToken, TokenStore } from "../../runtime/core/tokens.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { startService } from "../../runtime/server/service.ts";

export interface RunningService {
  url: string;
  close(): Promise<void>;
}

/** The service on the local platform, in this process, with one token for owner "bench". */
export async function serveLocal(token: string, tmpPrefix: string): Promise<RunningService> {
  const logger = silentLogger();
  const tokens = new TokenStore(new Map([[hashToken(token), "bench"]]));
  const stateDir = mkdtempSync(join(os.tmpdir(), tmpPrefix));
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 }, warmPool: [] });
  const platform = createLocalPlatform(config, { logger, clock: systemClock });
  const service = await startService({ config, tokens, logger, clock: systemClock, platform, port: 0 });
  return {
    url: service.url,
    close: async () => {
      await service.close();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** `--serve`: the child's side. Prints the URL, serves until its stdin closes. */
export async function serveUntilStdinEnds(serve: () => Promise<RunningService>): Promise<void> {
  const s = await serve();
  console.log(JSON.stringify({ url: s.url }));
  process.stdin.resume();
  await new Promise((r) => process.stdin.once("end", r));
  await s.close();
}

/** `script --serve ...args` in a process of its own; its URL once it listens. */
export async function serveInChild(script: string, args: string[] = []): Promise<RunningService> {
  const child = spawn(process.execPath, ["--import", "tsx", script, "--serve", ...args], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  child.stdin.on("error", () => undefined);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    // the first line that is ours: anything else the service prints is passed through
    lines.on("line", (l) => {
      if (l.startsWith('{"url":')) resolve((JSON.parse(l) as { url: string }).url);
      else process.stderr.write(`${l}\n`);
    });
    child.once("exit", (code) => reject(new Error(`the service process exited (${code}) before it listened`)));
  });
  return {
    url,
    close: async () => {
      child.stdin.end();
      await exited;
    },
  };
}
