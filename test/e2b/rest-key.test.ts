// Keys in E2B's shape: `sbx token create --e2b` mints an e2b_<40 hex> key, writes only its hash to
// the tokens file, and the real SDK authenticates with it (X-API-KEY) against the service that
// reads that file. No sandbox is needed: listing an owner's (empty) sandboxes proves the key.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { AuthenticationError, Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { TokenFile } from "../../runtime/core/tokens.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { type LocalRuntime, startLocalRuntime } from "../support/local.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-e2b-key-"));
let rt: LocalRuntime | undefined;
let app: ReturnType<typeof buildApp> | undefined;
afterAll(async () => {
  await app?.close();
  await rt?.close();
  rmSync(dir, { recursive: true, force: true });
});

function sink() {
  let text = "";
  const stream = new Writable({
    write: (c, _e, cb) => {
      text += c.toString();
      cb();
    },
  });
  return { stream, text: () => text };
}

describe("sbx token create --e2b", () => {
  it("mints an e2b_<hex> key that the SDK authenticates with", async () => {
    const tokensPath = join(dir, "tokens.json");
    const configPath = join(dir, "config.json");
    writeFileSync(configPath, JSON.stringify({ tokensPath, local: { stateDir: join(dir, "state") } }));
    const out = sink();
    const code = await runCli(["token", "create", "--owner", "carol", "--e2b", "--json"], {
      env: { SBX_CONFIG: configPath, PATH: process.env.PATH },
      io: { stdout: out.stream, stderr: sink().stream, stdin: process.stdin },
    });
    expect(code).toBe(0);
    const { token, owner } = JSON.parse(out.text());
    expect(owner).toBe("carol");
    expect(token).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(readFileSync(tokensPath, "utf8")).not.toContain(token); // only the hash is stored

    rt = await startLocalRuntime();
    app = buildApp({ manager: rt.manager, tokens: new TokenFile(tokensPath, () => {}), logger: silentLogger() });
    const url = await app.listen({ host: "127.0.0.1", port: 0 });
    // apiUrl is an option the SDK reads but does not declare: passed as a plain object
    const opts = (apiKey: string) => ({ apiKey, apiUrl: url });
    expect(await Sandbox.list(opts(token)).nextItems()).toEqual([]);
    await expect(Sandbox.list(opts(`${token}0`)).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
  });
});
