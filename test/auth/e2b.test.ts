// The E2B layer's X-API-KEY takes the same JWTs, through the real E2B SDK over a real socket: a
// token from a configured issuer lists its owner's sandboxes; a refused one is the SDK's
// AuthenticationError whose message names the failed check.
import { AuthenticationError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestIssuer } from "./issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "./support.ts";

let issuer: TestIssuer;
let t: AuthApp;
let url: string;

beforeAll(async () => {
  issuer = await new TestIssuer().start();
  t = await startAuthApp([issuerEntry("corp", issuer.url)]);
  url = await t.app.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  await t?.close();
  await issuer?.close();
});

// apiUrl is an option the SDK reads but does not declare: passed as a plain object
const opts = (apiKey: string) => ({ apiKey, apiUrl: url }) as never;

describe("X-API-KEY with a JWT", () => {
  it("authenticates the SDK as the token's owner", async () => {
    expect(await Sandbox.list(opts(issuer.token({ sub: "erin" }, { kid: "ec-1" }))).nextItems()).toEqual([]);
  });

  it("refuses an expired one with the reason, not the token", async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = issuer.token({ exp: now - 3600 }, { nowSeconds: now - 7200 });
    const err = await Sandbox.list(opts(token))
      .nextItems()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthenticationError);
    expect((err as Error).message).toContain("(expired)");
    expect((err as Error).message).not.toContain(token);
  });
});
