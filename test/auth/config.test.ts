// config.auth.issuers: what the schema refuses, each with an error naming the field and the fix.
import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";

const base = { name: "corp", issuer: "https://login.example.com", audiences: ["sbx"] };
const issuers = (...list: Record<string, unknown>[]) => validateRuntimeConfig({ auth: { issuers: list } });

describe("config.auth.issuers", () => {
  it("takes an https issuer with an audience, with defaults for the rest", () => {
    const [i] = issuers(base).auth.issuers;
    expect(i).toMatchObject({
      algorithms: ["RS256", "ES256"],
      clockSkewSeconds: 60,
      fetchTimeoutMs: 5000,
      maxBytes: 1024 * 1024,
      owner: { claim: "sub", prefix: "" },
      allowInsecureHttp: false,
    });
    expect(validateRuntimeConfig({}).auth.issuers).toEqual([]);
  });

  it("takes plain http on loopback only with allowInsecureHttp", () => {
    expect(issuers({ ...base, issuer: "http://127.0.0.1:8000", allowInsecureHttp: true }).auth.issuers).toHaveLength(1);
  });

  it.each<[string, Record<string, unknown>[], string, string]>([
    ["no audience", [{ ...base, audiences: undefined }], "config.auth.issuers.0.audiences", "at least one audience"],
    [
      "an empty audience list",
      [{ ...base, audiences: [] }],
      "config.auth.issuers.0.audiences",
      "at least one audience",
    ],
    [
      "an http issuer",
      [{ ...base, issuer: "http://login.example.com" }],
      "config.auth.issuers.0.issuer",
      "must be https",
    ],
    [
      "http off loopback even when allowed",
      [{ ...base, issuer: "http://10.0.0.1", allowInsecureHttp: true }],
      "config.auth.issuers.0.issuer",
      "only on a loopback host",
    ],
    [
      "an http jwksUrl",
      [{ ...base, jwksUrl: "http://keys.example.com/jwks" }],
      "config.auth.issuers.0.jwksUrl",
      "must be https",
    ],
    [
      "discoveryUrl and jwksUrl both",
      [{ ...base, discoveryUrl: "https://a.example/d", jwksUrl: "https://a.example/k" }],
      "config.auth.issuers.0.jwksUrl",
      "not both",
    ],
    [
      "credentials in the URL",
      [{ ...base, issuer: "https://u:p@login.example.com" }],
      "config.auth.issuers.0.issuer",
      "credentials",
    ],
    ["HS256", [{ ...base, algorithms: ["HS256"] }], "config.auth.issuers.0.algorithms.0", "HS* are never accepted"],
    ["none", [{ ...base, algorithms: ["none"] }], "config.auth.issuers.0.algorithms.0", "none and HS*"],
    [
      "two issuers of one name",
      [base, { ...base, issuer: "https://b.example" }],
      "config.auth.issuers.1.name",
      "another issuer has this name",
    ],
    [
      "one iss twice",
      [base, { ...base, name: "again" }],
      "config.auth.issuers.1.issuer",
      "another entry has this issuer",
    ],
    ["a bad name", [{ ...base, name: "Corp IdP" }], "config.auth.issuers.0.name", "lowercase letters"],
    ["an unknown key", [{ ...base, audience: "sbx" }], "config.auth.issuers.0", ""],
    ["a negative skew", [{ ...base, clockSkewSeconds: -1 }], "config.auth.issuers.0.clockSkewSeconds", ""],
  ])("refuses %s, naming the field", (_what, list, field, fix) => {
    expect(() => issuers(...list)).toThrow(field);
    if (fix) expect(() => issuers(...list)).toThrow(fix);
  });
});
