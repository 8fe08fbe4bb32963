// tokenFile's bearer token (the runtime's own service-account token, for an API server's
// discovery) goes only to the origins config names: a discovery document that points jwks_uri at
// another host gets the keys fetched from there without the token. Real servers on loopback.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestIssuer } from "./issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "./support.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-auth-bearer-"));
const tokenFile = join(dir, "token");
let discovery: TestIssuer;
let elsewhere: TestIssuer;
let t: AuthApp;

beforeAll(async () => {
  discovery = await new TestIssuer().start();
  elsewhere = await new TestIssuer().start();
  discovery.jwksUri = `${elsewhere.url}/jwks`;
  writeFileSync(tokenFile, "runtime-service-account-token\n");
  t = await startAuthApp([issuerEntry("api", discovery.url, { tokenFile })]);
});
afterAll(async () => {
  await t?.close();
  await discovery?.close();
  await elsewhere?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("tokenFile", () => {
  it("is sent to the configured discovery origin and not to a jwks_uri elsewhere", async () => {
    const token = elsewhere.token({ iss: discovery.url, sub: "frank" });
    const res = await t.app.inject({ method: "GET", url: "/v1/whoami", headers: { authorization: `Bearer ${token}` } });
    expect(res.statusCode, res.body).toBe(200);
    expect(discovery.seen).toEqual([
      { path: "/.well-known/openid-configuration", authorization: "Bearer runtime-service-account-token" },
    ]);
    expect(elsewhere.seen).toEqual([{ path: "/jwks", authorization: "-" }]);
  });
});
