// The Pulumi program itself (infra/program.ts) under mocks, fed each shipped stack file as
// stack config: the values reach the resources, and bad config stops before any resource.
import * as pulumi from "@pulumi/pulumi";
import { describe, expect, it } from "vitest";
import { tokenKeyPair } from "../../runtime/snapshot/registryToken.ts";
import { FIXTURE_BUNDLE } from "./fixtures.ts";
import { countByType, installMocks, isSecret, ofType, one, resetCaptured, settle, unwrap } from "./mocks.ts";
import { stackRaw } from "./stacks.ts";

installMocks("sbx", "test");
const { buildProgram } = await import("../../infra/program.ts");

/** Stack config as the engine hands it to the program: `sbx:key` -> string (JSON for structures). */
function setStackConfig(raw: Record<string, unknown>, secrets: Record<string, string> = {}, region = "us-east-1") {
  const all: Record<string, string> = { "aws:region": region };
  for (const [k, v] of Object.entries(raw)) all[`sbx:${k}`] = typeof v === "string" ? v : JSON.stringify(v);
  for (const [k, v] of Object.entries(secrets)) all[`sbx:${k}`] = v;
  pulumi.runtime.setAllConfig(
    all,
    Object.keys(secrets).map((k) => `sbx:${k}`),
  );
}

async function run(raw: Record<string, unknown>, secrets: Record<string, string> = {}) {
  resetCaptured();
  setStackConfig(raw, secrets);
  let bundled = 0;
  const outputs = buildProgram({
    bundle: () => {
      bundled++;
      return FIXTURE_BUNDLE;
    },
  });
  return { outputs, resources: await settle(), bundled };
}

const tokens = JSON.stringify({ alice: "a".repeat(32), bob: "b".repeat(32) });
const PAIR = tokenKeyPair({ now: new Date(0), commonName: "program test" });
const tokenSnapshots = () => ({
  repositoryUrl: "http://10.244.0.1:5000/sbx/snapshots",
  podRegistry: "http://10.244.0.1:5000",
  registryToken: { certificate: PAIR.certPem },
});

describe("buildProgram with the shipped stacks", () => {
  it("prod: quota, node group sizes and manager replicas come from Pulumi.prod.yaml", async () => {
    const { resources, outputs, bundled } = await run(stackRaw("prod"), { apiTokens: tokens });
    expect(bundled).toBe(1);
    expect(await unwrap(outputs.mode)).toBe("eks");
    expect(one(resources, "kubernetes:core/v1:ResourceQuota", "sandbox-budget").inputs.spec.hard).toEqual({
      "requests.cpu": "110",
      "limits.cpu": "1100",
      "requests.memory": "400Gi",
      "limits.memory": "1600Gi",
      pods: "1100",
    });
    expect(one(resources, "aws:eks/nodeGroup:NodeGroup", "-sandbox").inputs.scalingConfig).toEqual({
      minSize: 2,
      maxSize: 30,
      desiredSize: 10,
    });
    expect(one(resources, "kubernetes:apps/v1:Deployment", "sbx-manager").inputs.spec.replicas).toBe(4);
    expect(ofType(resources, "aws:ec2/natGateway:NatGateway")).toHaveLength(3); // perAz × 3 AZs
    expect(one(resources, "eks:index:Cluster", "eks").inputs.publicAccessCidrs).toEqual(["203.0.113.0/24"]);
    const egress = one(resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress").inputs.spec.egress;
    expect(egress).toEqual([
      {
        to: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "tools" } },
            podSelector: { matchLabels: { app: "tool-gateway" } },
          },
        ],
        ports: [{ protocol: "TCP", port: 8080 }],
      },
    ]);
  });

  it("prod: the tokens Secret holds only sha256 hashes of the configured tokens", async () => {
    const { resources } = await run(stackRaw("prod"), { apiTokens: tokens });
    const secret = one(resources, "kubernetes:core/v1:Secret", "sbx-api-tokens");
    const stored = JSON.parse(secret.inputs.stringData["tokens.json"]);
    expect(Object.values(stored).sort()).toEqual(["alice", "bob"]);
    for (const hash of Object.keys(stored)) expect(hash).toMatch(/^[0-9a-f]{64}$/);
    expect(secret.inputs.stringData["tokens.json"]).not.toContain("a".repeat(32));
    expect(isSecret(secret.raw.stringData) || isSecret(secret.raw.stringData?.["tokens.json"])).toBe(true);
  });

  it("dev: a small eks stack", async () => {
    const { resources } = await run(stackRaw("dev"));
    expect(one(resources, "kubernetes:core/v1:ResourceQuota", "sandbox-budget").inputs.spec.hard["requests.cpu"]).toBe(
      "8",
    );
    expect(ofType(resources, "aws:ec2/natGateway:NatGateway")).toHaveLength(1);
    expect(one(resources, "kubernetes:apps/v1:Deployment", "sbx-manager").inputs.spec.replicas).toBe(1);
  });

  it("local: existing-cluster mode deploys Tenancy + Runtime with the kubeconfig from config", async () => {
    const { resources } = await run(stackRaw("local"), { kubeconfig: "apiVersion: v1\nkind: Config\n" });
    expect(resources.filter((r) => r.type.startsWith("aws:") || r.type.startsWith("eks:"))).toEqual([]);
    const providers = ofType(resources, "pulumi:providers:kubernetes");
    expect(providers).toHaveLength(1);
    expect(providers[0].inputs.kubeconfig).toBe("apiVersion: v1\nkind: Config\n");
    expect(countByType(resources)["kubernetes:apps/v1:Deployment"]).toBe(2);
    const cfg = JSON.parse(one(resources, "kubernetes:core/v1:ConfigMap", "sbx-config").inputs.data["config.json"]);
    expect(cfg.catalog).toEqual({ base: "python:3.12-slim", data: "python:3.12-slim" });
    expect(cfg.credentials).toBeUndefined();
  });

  it("local with pods moving their layers: the token key from its secret reaches only the Secret", async () => {
    const raw = { ...stackRaw("local"), snapshots: tokenSnapshots() };
    const { resources } = await run(raw, {
      kubeconfig: "apiVersion: v1\nkind: Config\n",
      registryTokenKey: PAIR.keyPem,
    });
    const secret = one(resources, "kubernetes:core/v1:Secret", "sbx-registry-token");
    expect(secret.inputs.stringData["key.pem"]).toBe(PAIR.keyPem);
    expect(isSecret(secret.raw.stringData) || isSecret(secret.raw.stringData["key.pem"])).toBe(true);
    const cfg = JSON.parse(one(resources, "kubernetes:core/v1:ConfigMap", "sbx-config").inputs.data["config.json"]);
    expect(cfg.snapshots.tokenAuth.keyFile).toBe("/etc/sbx/registry-token/key.pem");
    for (const r of resources) if (r !== secret) expect(JSON.stringify(r.inputs), r.name).not.toContain("PRIVATE KEY");
  });

  it("a prebuilt runtime image skips bundling", async () => {
    const { resources, bundled } = await run({
      ...stackRaw("dev"),
      runtime: { image: "ghcr.io/acme/sbx-runtime:1.0.0" },
    });
    expect(bundled).toBe(0);
    expect(
      one(resources, "kubernetes:apps/v1:Deployment", "sbx-manager").inputs.spec.template.spec.containers[0].image,
    ).toBe("ghcr.io/acme/sbx-runtime:1.0.0");
  });
});

describe("bad stack config stops the program before any resource", () => {
  it("a registry token key that is not the certificate's, named and never printed", async () => {
    resetCaptured();
    const wrong = tokenKeyPair({ now: new Date(0) }).keyPem;
    setStackConfig(
      { ...stackRaw("local"), snapshots: tokenSnapshots() },
      { kubeconfig: "apiVersion: v1\nkind: Config\n", registryTokenKey: wrong },
    );
    let err: Error | undefined;
    try {
      buildProgram({ bundle: () => FIXTURE_BUNDLE });
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).toMatch(/sbx:registryTokenKey: .*is not the key of sbx:snapshots.registryToken.certificate/);
    for (const line of wrong.split("\n").filter((l) => l && !l.startsWith("-----")))
      expect(err?.message).not.toContain(line);
    expect(await settle(50)).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["typo in a key", { ...stackRaw("dev"), budgets: { cpu: "8" } }, "sbx:budgets: invalid value"],
    [
      "unknown instance type",
      { ...stackRaw("dev"), nodeGroups: { sandbox: [{ instanceType: "m7i.mega" }] } },
      'sbx:nodeGroups.sandbox[0].instanceType: invalid value "m7i.mega": unknown instance type',
    ],
    [
      "local without kubeconfig",
      stackRaw("local"),
      "sbx:kubeconfig: invalid value undefined: existing-cluster mode needs the cluster's kubeconfig",
    ],
  ])("%s", async (_label, raw, message) => {
    resetCaptured();
    setStackConfig(raw);
    expect(() => buildProgram({ bundle: () => FIXTURE_BUNDLE })).toThrow(message);
    expect(await settle(50)).toEqual([]);
  });
});
