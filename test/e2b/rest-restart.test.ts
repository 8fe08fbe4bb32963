// The E2B layer's state across a service restart on the real local backend: the access token
// (derived from the caller's key and the sandbox's reserved metadata, only its hash stored) still
// opens the sandbox and connect hands out the same one, and a moved timeout end (in the sandbox's
// reserved metadata, so in its record under the local state dir) is still where setTimeout put it.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { serveWithE2b } from "../support/e2b.ts";
import { localConfig, TOKENS } from "../support/local.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** The service as startService wires it, on a given state dir. */
async function start(stateDir: string) {
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 } });
  const logger = silentLogger();
  const platform = createLocalPlatform(config, { logger, clock: systemClock });
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform });
  return { manager, ...(await serveWithE2b(config, manager, logger, systemClock)) };
}

describe("E2B state across a restart (local platform)", () => {
  it("the access token and a moved end survive", async () => {
    const { stateDir, cleanup } = localConfig();
    cleanups.push(cleanup);
    const first = await start(stateDir);
    const opts = (url: string) => ({ apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: url });
    const s = await Sandbox.create("base", opts(first.url));
    const token = (s as unknown as { envdAccessToken: string }).envdAccessToken;
    await s.setTimeout(1_234_000);
    const end = (await s.getInfo()).endAt.getTime();
    // a crash, not a clean stop: the sandbox stays up for the next process to adopt
    await first.app.close();
    await first.manager.reaper.stop();

    const second = await start(stateDir);
    cleanups.push(async () => {
      await second.app.close();
      await second.manager.close();
    });
    expect(await second.layer.access.resolve(s.sandboxId, token)).toEqual({ owner: "alice", sandboxId: s.sandboxId });
    expect((await Sandbox.getInfo(s.sandboxId, opts(second.url))).endAt.getTime()).toBe(end);
    const again = await Sandbox.connect(s.sandboxId, opts(second.url));
    expect((again as unknown as { envdAccessToken: string }).envdAccessToken).toBe(token);
    expect(await again.kill()).toBe(true);
  });
});
