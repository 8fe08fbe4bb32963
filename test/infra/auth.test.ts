// sbx:auth in stack config: issuers pass to the runtime's config.json as validated by the runtime's
// own schema (errors renamed to the stack key), and the cluster's service-account issuer is wired
// in: EKS's OIDC issuer URL from the cluster in eks mode (on by default), the API server's own
// discovery with the pod's CA and token in existing-cluster mode (when asked for, with its iss).
import { describe, expect, it } from "vitest";
import { readAuth } from "../../infra/authConfig.ts";
import { type Deployed, deploy } from "./deploy.ts";
import { EKS_OIDC_ISSUER, one } from "./mocks.ts";

const configOf = (run: Deployed) =>
  JSON.parse(one(run.resources, "kubernetes:core/v1:ConfigMap", "configmap-sbx-config").inputs.data["config.json"]);

const corp = { name: "corp", issuer: "https://login.example.com", audiences: ["sbx"] };

describe("sbx:auth in eks mode", () => {
  it("accepts EKS's own OIDC issuer by default: owner the service account, team its namespace", async () => {
    const issuers = configOf(await deploy("eks")).auth.issuers;
    expect(issuers).toEqual([
      {
        name: "cluster",
        issuer: EKS_OIDC_ISSUER,
        audiences: ["sbx"],
        owner: { claim: "sub", prefix: "" },
        team: { claim: ["kubernetes.io", "namespace"], stripPrefix: "" },
      },
    ]);
  });

  it("passes the stack's issuers through beside it, and can turn the cluster's off", async () => {
    const both = configOf(await deploy("eks", { auth: { issuers: [corp] } })).auth.issuers;
    expect(both.map((i: { name: string }) => i.name)).toEqual(["corp", "cluster"]);
    const off = configOf(await deploy("eks", { auth: { issuers: [corp], clusterIssuer: { enabled: false } } }));
    expect(off.auth.issuers).toEqual([corp]);
  });
});

describe("sbx:auth in existing-cluster mode", () => {
  it("has no issuer unless asked", async () => {
    expect(configOf(await deploy("existing-cluster")).auth).toBeUndefined();
  });

  it("reaches the API server's keys with the pod's CA and token when the cluster issuer is on", async () => {
    const run = await deploy("existing-cluster", {
      auth: { clusterIssuer: { enabled: true, issuer: "https://kubernetes.default.svc.cluster.local" } },
    });
    expect(configOf(run).auth.issuers[0]).toMatchObject({
      issuer: "https://kubernetes.default.svc.cluster.local",
      jwksUrl: "https://kubernetes.default.svc/openid/v1/jwks",
      caFile: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
      tokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
    });
  });
});

describe("sbx:auth validation", () => {
  it.each<[string, unknown, "eks" | "existing-cluster", string]>([
    [
      "an issuer without audience",
      { issuers: [{ ...corp, audiences: undefined }] },
      "eks",
      "sbx:auth.issuers.0.audiences",
    ],
    ["an http issuer", { issuers: [{ ...corp, issuer: "http://login.example.com" }] }, "eks", "must be https"],
    ["HS256", { issuers: [{ ...corp, algorithms: ["HS256"] }] }, "eks", "sbx:auth.issuers.0.algorithms.0"],
    ["an unknown key", { issuer: [] }, "eks", "sbx:auth"],
    [
      "a cluster issuer without its iss off EKS",
      { clusterIssuer: { enabled: true } },
      "existing-cluster",
      "sbx:auth.clusterIssuer.issuer",
    ],
    [
      "an iss given on EKS",
      { clusterIssuer: { issuer: "https://x.example" } },
      "eks",
      "reads the issuer from the cluster",
    ],
    [
      "a cluster issuer named like a stack issuer",
      { issuers: [{ ...corp, name: "cluster" }] },
      "eks",
      "sbx:auth.clusterIssuer.name",
    ],
  ])("refuses %s, naming the key", (_what, raw, mode, expected) => {
    expect(() => readAuth(raw, mode)).toThrow(expected);
  });
});
