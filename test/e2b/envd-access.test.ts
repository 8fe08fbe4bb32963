// envd's access check remembers tokens it verified (runtime/server/e2b/verifiedTokens.ts), so a
// token must stop working the moment the sandbox's record stops vouching for it: here a token
// minted by connect with one of the owner's keys is replaced by a connect with another key.
// Real SDK, real sandbox on the local platform.
import { AuthenticationError, Sandbox } from "e2b";
import { afterAll, beforeAll, expect, it } from "vitest";
import { silentLogger } from "../../runtime/core/log.ts";
import { hashToken, TokenStore } from "../../runtime/core/tokens.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { type LocalRuntime, startLocalRuntime } from "../support/local.ts";

const KEY_1 = "e2b_1111111111111111111111111111111111111111";
const KEY_2 = "e2b_2222222222222222222222222222222222222222";

let rt: LocalRuntime;
let app: ReturnType<typeof buildApp>;
let url: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  // the same Manager behind an app whose tokens give alice two keys
  const tokens = new TokenStore(new Map([KEY_1, KEY_2].map((k) => [hashToken(k), "alice"])));
  app = buildApp({ manager: rt.manager, tokens, logger: silentLogger() });
  url = await app.listen({ host: "127.0.0.1", port: 0 });
}, 120_000);

afterAll(async () => {
  app?.server.closeAllConnections();
  await app?.close();
  await rt?.close();
});

it("a token connect replaced is refused at once, though it was verified (and remembered) before", async () => {
  // made through our own API: each connect derives a token from the caller's key and records its hash
  const made = await rt.manager.create({ owner: "alice", profile: "base", size: "nano", idleTimeoutSeconds: 0 });
  await rt.manager.wait("alice", made.id, { timeoutMs: 60_000 });
  const first = await Sandbox.connect(made.id, { apiKey: KEY_1, apiUrl: url, sandboxUrl: url });
  expect(await first.commands.list()).toEqual([]); // verified, and now remembered
  expect(await first.commands.list()).toEqual([]); // the remembered path

  // the second key's connect replaces the recorded hash; the first token is still the remembered one
  const second = await Sandbox.connect(made.id, { apiKey: KEY_2, apiUrl: url, sandboxUrl: url });
  await expect(first.commands.list()).rejects.toBeInstanceOf(AuthenticationError);
  await expect(first.files.read("/etc/hostname")).rejects.toBeInstanceOf(AuthenticationError);
  expect((await second.commands.run("echo second")).stdout).toBe("second\n");

  // and after the sandbox is gone, its token opens nothing
  await rt.manager.kill("alice", made.id);
  await expect(second.commands.list()).rejects.toBeInstanceOf(AuthenticationError);
});
