// JWTs from a real issuer on loopback (test/auth/issuer-server.ts: discovery, JWKS, RS256 and
// ES256 keys) against the service in-process: an accepted token maps to owner and team, and each
// bad token is a 401 naming the failed check, with neither the answer nor the logs carrying it.
import { createHmac } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOKENS } from "../support/local.ts";
import { TestIssuer } from "./issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "./support.ts";

let issuer: TestIssuer;
let t: AuthApp;
const now = () => Math.floor(t.clock.ms / 1000);

beforeAll(async () => {
  issuer = await new TestIssuer().start();
  t = await startAuthApp([
    issuerEntry("corp", issuer.url, {
      owner: { claim: "sub", prefix: "corp:" },
      team: { claim: "groups", stripPrefix: "sbx-team-" },
    }),
  ]);
});
afterAll(async () => {
  await t?.close();
  await issuer?.close();
});

const whoami = (token: string) =>
  t.app.inject({ method: "GET", url: "/v1/whoami", headers: { authorization: `Bearer ${token}` } });

describe("a JWT from a configured issuer", () => {
  it.each(["rsa-1", "ec-1"])("signed with %s maps sub to the owner and the prefixed group to the team", async (kid) => {
    const token = issuer.token({ sub: "alice", groups: ["eng", "sbx-team-ml"] }, { kid, nowSeconds: now() });
    const res = await whoami(token);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ owner: "corp:alice", team: "ml", via: "corp" });
  });

  it("acts as that owner on the API: the owner's sandboxes, not another's", async () => {
    const token = issuer.token({ sub: "bob" }, { nowSeconds: now() });
    const res = await t.app.inject({
      method: "GET",
      url: "/v1/sandboxes",
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.statusCode, res.body).toBe(200);
  });

  it("leaves static tokens as they were", async () => {
    const res = await whoami(TOKENS.alice);
    expect(res.json()).toEqual({ owner: "alice", via: "token" });
  });
});

/** HMAC-SHA256 keyed with the RSA public key's PEM: the classic algorithm-confusion forgery. */
function hs256WithPublicKey(): string {
  const pem = issuer.key("rsa-1").publicKey.export({ type: "spki", format: "pem" });
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const input = `${b64({ alg: "HS256", kid: "rsa-1", typ: "JWT" })}.${b64({ iss: issuer.url, aud: "sbx", sub: "mallory", exp: now() + 600 })}`;
  return `${input}.${createHmac("sha256", pem).update(input).digest("base64url")}`;
}

function algNone(): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  return `${b64({ alg: "none", typ: "JWT" })}.${b64({ iss: issuer.url, aud: "sbx", sub: "mallory", exp: now() + 600 })}.`;
}

function tampered(): string {
  const [h, , s] = issuer.token({ sub: "alice" }, { nowSeconds: now() }).split(".");
  const p = Buffer.from(JSON.stringify({ iss: issuer.url, aud: "sbx", sub: "root", exp: now() + 600 })).toString(
    "base64url",
  );
  return `${h}.${p}.${s}`;
}

const BAD: [string, () => string, string][] = [
  ["alg none", algNone, "algorithm_not_allowed"],
  ["HS256 signed with the public key", hs256WithPublicKey, "algorithm_not_allowed"],
  [
    "expired",
    () => issuer.token({ iat: now() - 7200, nbf: now() - 7200, exp: now() - 3600 }, { nowSeconds: now() }),
    "expired",
  ],
  [
    "from the future",
    () => issuer.token({ iat: now() + 3600, nbf: now() + 3600, exp: now() + 7200 }, { nowSeconds: now() }),
    "not_yet_valid",
  ],
  ["for the wrong audience", () => issuer.token({ aud: "someone-else" }, { nowSeconds: now() }), "wrong_audience"],
  [
    "from an issuer not configured",
    () => issuer.token({ iss: "https://evil.example" }, { nowSeconds: now() }),
    "wrong_issuer",
  ],
  ["with an unknown kid", () => issuer.token({}, { header: { kid: "no-such-key" }, nowSeconds: now() }), "unknown_key"],
  ["with a payload changed after signing", tampered, "bad_signature"],
  [
    "ES256 in the header over an RSA key",
    () => issuer.token({}, { header: { alg: "ES256" }, nowSeconds: now() }),
    "algorithm_not_allowed",
  ],
  ["without exp", () => issuer.token({ exp: undefined }, { nowSeconds: now() }), "missing_claim"],
  ["without the owner's claim", () => issuer.token({ sub: undefined }, { nowSeconds: now() }), "missing_claim"],
];

describe("a bad token", () => {
  it.each(BAD)("%s is a 401 naming the check, never the token", async (_what, make, reason) => {
    const token = make();
    const res = await whoami(token);
    expect(res.statusCode, res.body).toBe(401);
    const body = res.json();
    expect(body.error.code).toBe("unauthenticated");
    expect(body.error.details.reason).toBe(reason);
    expect(body.error.message).toContain(`(${reason})`);
    expect(res.body).not.toContain(token);
    expect(res.body).not.toContain(token.split(".")[2] || "(no signature)");
    expect(JSON.stringify(t.logs)).not.toContain(token);
  });

  it("within the skew, a token a few seconds past exp still passes; beyond it, not", async () => {
    const token = issuer.token({ exp: now() - 30 }, { nowSeconds: now() - 600 });
    expect((await whoami(token)).statusCode).toBe(200);
    const old = issuer.token({ exp: now() - 61 }, { nowSeconds: now() - 600 });
    expect((await whoami(old)).json().error.details.reason).toBe("expired");
  });
});
