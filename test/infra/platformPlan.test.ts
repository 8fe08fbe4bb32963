// planPlatform (components/platform/plan.ts): what SandboxPlatform creates, decided from the
// validated stack config alone, without Pulumi. The component's resources under Pulumi mocks are
// platform.test.ts; this is the decision table.
import { describe, expect, it } from "vitest";
import type { SandboxPlatformArgs } from "../../components/platform/args.ts";
import { planPlatform } from "../../components/platform/plan.ts";
import { tokenKeyPair } from "../../runtime/snapshot/registryToken.ts";
import { eksConfig, existingClusterConfig, FIXTURE_BUNDLE } from "./fixtures.ts";

const PAIR = tokenKeyPair({ now: new Date(0), commonName: "plan test" });
const delivery: SandboxPlatformArgs["delivery"] = { kind: "bundle", bundle: FIXTURE_BUNDLE, nodeImage: "node:24" };
const TOKEN = { certificate: PAIR.certPem, service: "regs" };
const LAYERS = { registryToken: TOKEN, layerRegistry: {} };

describe("planPlatform", () => {
  it("existing-cluster mode: no AWS children, the sandbox namespace's tenancy, no snapshots by default", () => {
    const plan = planPlatform(existingClusterConfig(), { delivery, kubeconfig: "k" });
    expect(plan.mode).toBe("existing-cluster");
    expect(plan.eks).toBeUndefined();
    expect(plan.inClusterSnapshots).toBeUndefined();
    expect(plan.namedSnapshots).toBeUndefined();
    expect(plan.layerRegistry).toBeUndefined();
    expect(plan.tenancy).toMatchObject({ namespace: "sbx-sandboxes", blockedCidrs: expect.any(Array) });
    expect(plan.runtime).toMatchObject({ namespace: "sbx-system", sandboxNamespace: "sbx-sandboxes", delivery });
  });

  it("eks mode: the AWS children's args, the VPC's range blocked ahead of the configured ones", () => {
    const cfg = eksConfig({ blockedCidrs: ["192.0.2.0/24"] });
    const plan = planPlatform(cfg, { delivery, region: "eu-west-1" });
    expect(plan.eks).toMatchObject({
      clusterName: "sbx-test",
      region: "eu-west-1",
      network: cfg.network,
      identity: { prefix: "sbx-test" },
      cluster: { clusterName: "sbx-test", nodeGroups: cfg.nodeGroups },
      images: { prefix: "sbx-test", snapshots: { enabled: cfg.snapshots.enabled } },
    });
    expect(plan.tenancy.blockedCidrs).toEqual([cfg.network.cidr, "192.0.2.0/24"]);
  });

  it("the layer registry in eks mode: the runtime reaches it in-cluster, and ECR keeps no snapshots", () => {
    const plan = planPlatform(eksConfig({ snapshots: LAYERS, registryTokenKey: "(secret)" }), {
      delivery,
      region: "eu-west-1",
      registryTokenKey: PAIR.keyPem,
    });
    expect(plan.inClusterSnapshots).toMatchObject({
      repositoryUrl: "http://sbx-layer-registry.sbx-system.svc:5000/sbx-snapshots",
      inCluster: true,
      registryToken: { ...TOKEN, key: PAIR.keyPem },
    });
    expect(plan.eks?.images.snapshots.enabled).toBe(false);
    expect(plan.layerRegistry).toMatchObject({ namespace: "sbx-system", sandboxNamespace: "sbx-sandboxes" });
  });

  it("existing-cluster mode with a named registry: pods move their layers when it has a token", () => {
    const snapshots = { repositoryUrl: "http://10.244.0.1:5000/sbx/snapshots", podRegistry: "http://10.244.0.1:5000" };
    const named = { repositoryUrl: snapshots.repositoryUrl };
    const plain = planPlatform(existingClusterConfig({ snapshots: named }), { delivery, kubeconfig: "k" });
    expect(plain.namedSnapshots).toEqual({ repositoryUrl: snapshots.repositoryUrl, retentionDays: expect.any(Number) });
    const token = planPlatform(
      existingClusterConfig({ snapshots: { ...snapshots, registryToken: TOKEN }, registryTokenKey: "(secret)" }),
      {
        delivery,
        kubeconfig: "k",
        registryTokenKey: PAIR.keyPem,
      },
    );
    expect(token.namedSnapshots).toMatchObject({
      podRegistry: snapshots.podRegistry,
      registryToken: { ...TOKEN, key: PAIR.keyPem },
    });
  });

  it.each([
    [
      "existing-cluster without a kubeconfig",
      () => planPlatform(existingClusterConfig(), { delivery }),
      "sbx:kubeconfig",
    ],
    ["eks without a region", () => planPlatform(eksConfig(), { delivery }), "aws:region: invalid value"],
    [
      "a registry token without its key (named first, as before the plan)",
      () => planPlatform(eksConfig({ snapshots: LAYERS, registryTokenKey: "(secret)" }), { delivery }),
      "sbx:registryTokenKey",
    ],
  ])("refuses %s", (_what, plan, message) => {
    expect(plan).toThrow(message);
  });
});
