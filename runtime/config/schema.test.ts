// snapshots.podRegistry, snapshots.tokenAuth and snapshots.inCluster: what the schema lets pods be given
// (runtime/k8s/podLayers.ts), and the error for what it refuses names the field and the fix.
import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "./schema.ts";

const snapshots = (over: Record<string, unknown>) =>
  validateRuntimeConfig({ snapshots: { registry: "http://127.0.0.1:5000", ...over } });

describe("snapshots.podRegistry", () => {
  it("takes http://host:port, and is unset by default", () => {
    expect(snapshots({ podRegistry: "http://10.0.0.5:5000" }).snapshots?.podRegistry).toBe("http://10.0.0.5:5000");
    expect(snapshots({}).snapshots?.podRegistry).toBeUndefined();
  });

  it.each([
    ["https://10.0.0.5:5000", "https and a path are not supported yet"],
    ["http://10.0.0.5:5000/v2", "https and a path are not supported yet"],
  ])("refuses %s", (podRegistry, why) => {
    expect(() => snapshots({ podRegistry })).toThrow(why);
    expect(() => snapshots({ podRegistry })).toThrow("config.snapshots.podRegistry");
  });

  it("refuses a registry with a login: the replica's login is never handed to a sandbox", () => {
    const auth = { username: "sbx", passwordFile: "/run/secrets/registry" };
    expect(() => snapshots({ podRegistry: "http://10.0.0.5:5000", auth })).toThrow(
      /config\.snapshots\.podRegistry.*without login/,
    );
    expect(() =>
      validateRuntimeConfig({
        snapshots: { registry: "123456789012.dkr.ecr.eu-west-1.amazonaws.com", podRegistry: "http://10.0.0.5:5000" },
      }),
    ).toThrow("without login");
  });
});

describe("snapshots.tokenAuth", () => {
  const tokenAuth = { keyFile: "/run/secrets/token/key.pem", certFile: "/run/secrets/token/cert.pem" };

  it("lets pods move their layers with a token each, with the registry's names and a ttl by default", () => {
    const s = snapshots({ podRegistry: "http://10.0.0.5:5000", tokenAuth }).snapshots;
    expect(s?.tokenAuth).toEqual({ ...tokenAuth, issuer: "sbx", service: "sbx-registry", ttlSeconds: 900 });
  });

  it("refuses it next to an htpasswd login, with ECR, and a ttl out of range", () => {
    const auth = { username: "sbx", passwordFile: "/run/secrets/registry" };
    expect(() => snapshots({ tokenAuth, auth })).toThrow(/config\.snapshots\.tokenAuth.*exclude each other/);
    expect(() =>
      validateRuntimeConfig({ snapshots: { registry: "123456789012.dkr.ecr.eu-west-1.amazonaws.com", tokenAuth } }),
    ).toThrow(/config\.snapshots\.tokenAuth.*ECR issues its own tokens/);
    expect(() => snapshots({ tokenAuth: { ...tokenAuth, ttlSeconds: 5 } })).toThrow(
      "config.snapshots.tokenAuth.ttlSeconds",
    );
    expect(() => snapshots({ tokenAuth: { ...tokenAuth, extra: 1 } })).toThrow("config.snapshots.tokenAuth");
  });
});

describe("snapshots.inCluster", () => {
  const tokenAuth = { keyFile: "/run/secrets/token/key.pem", certFile: "/run/secrets/token/cert.pem" };
  const svc = "http://sbx-layer-registry.sbx-system.svc:5000";

  it("takes a Service URL with tokenAuth, and is unset by default", () => {
    expect(snapshots({ registry: svc, inCluster: true, tokenAuth }).snapshots?.inCluster).toBe(true);
    expect(snapshots({}).snapshots?.inCluster).toBeUndefined();
  });

  it.each([
    ["a registry that is not a Service", { registry: "http://10.0.0.5:5000", tokenAuth }],
    ["no tokenAuth", { registry: svc }],
    ["a podRegistry too", { registry: svc, tokenAuth, podRegistry: "http://10.0.0.5:5000" }],
  ])("refuses %s, naming the field and what it needs", (_, over) => {
    expect(() => snapshots({ ...over, inCluster: true })).toThrow(
      /config\.snapshots\.inCluster.*http:\/\/<service>\.<namespace>\.svc:<port>, tokenAuth, and no podRegistry/,
    );
  });
});
