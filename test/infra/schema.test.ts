import { describe, expect, it } from "vitest";
import { planNodeGroups } from "../../components/cluster/plan.ts";
import { planSizingWarnings } from "../../components/platform/sizing.ts";
import { planQuota } from "../../components/tenancy/plan.ts";
import { parseConfigValue } from "../../infra/config.ts";
import { validatePlatformConfig } from "../../infra/schema.ts";
import { stackRaw } from "./stacks.ts";

describe("defaults", () => {
  it("an empty config is a valid eks platform with the documented defaults", () => {
    const c = validatePlatformConfig({});
    expect(c).toMatchObject({
      name: "sbx",
      mode: "eks",
      cluster: {
        version: "1.33",
        admins: [],
        logTypes: ["api", "audit", "authenticator"],
        endpointPublicAccess: true,
        endpointPrivateAccess: true,
      },
      network: { mode: "create", cidr: "10.0.0.0/16", azCount: 2, natGateways: "single" },
      vpcCni: { prefixDelegation: true, warmPrefixTarget: 1, networkPolicy: true },
      nodeGroups: {
        system: { name: "system", instanceType: "m7i.large", minSize: 2, maxSize: 4, desiredSize: 2 },
        sandbox: [{ name: "sandbox", instanceType: "m7i.xlarge", minSize: 1, maxSize: 10, desiredSize: 2 }],
      },
      images: { profiles: ["base", "data", "web", "ml", "rl"], tag: "v1" },
      snapshots: { enabled: true, retentionDays: 7 },
      namespaces: { sandbox: "sbx-sandboxes", runtime: "sbx-system" },
      budget: { cpu: "16", memory: "32Gi" },
      defaults: { profile: "base", size: "nano", ttlSeconds: 3600, idleTimeoutSeconds: 900 },
      runtime: { nodeImage: "node:20-bookworm-slim", managerReplicas: 2, controllerReplicas: 2 },
    });
    expect(c.nodeGroups.gpu).toBeUndefined();
    expect(c.sizeClasses.nano).toMatchObject({ cpuRequest: "100m", memoryRequest: "128Mi", memoryLimit: "512Mi" });
  });

  it.each([
    ['{"a":1}', { a: 1 }],
    ["true", true],
    ["3", 3],
    ["dev", "dev"],
    ["existing-cluster", "existing-cluster"],
    ["[1,2]", [1, 2]],
    ["{not json", "{not json"],
  ])("parseConfigValue(%j)", (text, value) => {
    expect(parseConfigValue(text)).toEqual(value);
  });
});

describe("validation errors name the key, the value and the fix", () => {
  it.each<[string, Record<string, unknown>, string]>([
    [
      "unknown top-level key",
      { nodeGroup: {} },
      "sbx:nodeGroup: invalid value {}: unknown key; use one of: name, mode",
    ],
    [
      "unknown nested key",
      { cluster: { verison: "1.33" } },
      'sbx:cluster.verison: invalid value "1.33": unknown key; use one of: version',
    ],
    ["bad mode", { mode: "k8s" }, 'sbx:mode: invalid value "k8s": use one of: eks, existing-cluster'],
    [
      "unpinned version",
      { cluster: { version: "latest" } },
      'sbx:cluster.version: invalid value "latest": pin a minor version such as "1.33"',
    ],
    [
      "bad admin arn",
      { cluster: { admins: ["alice"] } },
      'sbx:cluster.admins[0]: invalid value "alice": use an IAM role or user ARN',
    ],
    [
      "no endpoint",
      { cluster: { endpointPublicAccess: false, endpointPrivateAccess: false } },
      "sbx:cluster.endpointPrivateAccess: invalid value false: at least one of",
    ],
    [
      "bad cidr",
      { network: { cidr: "10.0.0.0/33" } },
      'sbx:network.cidr: invalid value "10.0.0.0/33": use an IPv4 CIDR',
    ],
    [
      "host bits",
      { network: { cidr: "10.0.0.1/16" } },
      'sbx:network.cidr: invalid value "10.0.0.1/16": host bits are set; use the network address 10.0.0.0/16',
    ],
    [
      "tiny vpc",
      { network: { cidr: "10.0.0.0/24" } },
      'sbx:network.cidr: invalid value "10.0.0.0/24": use a /20 or larger network',
    ],
    ["one az", { network: { azCount: 1 } }, "sbx:network.azCount: invalid value 1: use a whole number from 2 to 6"],
    [
      "existing vpc one subnet",
      { network: { mode: "existing", vpcId: "vpc-0123456789abcdef0", privateSubnetIds: ["subnet-0123456789abcdef0"] } },
      "sbx:network.privateSubnetIds: invalid value",
    ],
    [
      "network policy off",
      { vpcCni: { networkPolicy: false } },
      "sbx:vpcCni.networkPolicy: invalid value false: sandbox isolation relies on NetworkPolicy enforcement",
    ],
    [
      "unknown instance type",
      { nodeGroups: { sandbox: [{ instanceType: "m9z.mega" }] } },
      'sbx:nodeGroups.sandbox[0].instanceType: invalid value "m9z.mega": unknown instance type',
    ],
    [
      "max below min",
      { nodeGroups: { sandbox: [{ minSize: 5, maxSize: 2 }] } },
      "sbx:nodeGroups.sandbox[0].maxSize: invalid value 2: must be at least minSize (5)",
    ],
    [
      "desired out of range",
      { nodeGroups: { system: { minSize: 1, maxSize: 2, desiredSize: 5 } } },
      "sbx:nodeGroups.system.desiredSize: invalid value 5: must be between minSize (1) and maxSize (2)",
    ],
    [
      "duplicate group",
      { nodeGroups: { sandbox: [{ name: "a" }, { name: "a" }] } },
      'sbx:nodeGroups.sandbox[1].name: invalid value "a": node group names must be unique',
    ],
    [
      "no sandbox group",
      { nodeGroups: { sandbox: [] } },
      "sbx:nodeGroups.sandbox: invalid value []: define at least one sandbox node group",
    ],
    [
      "bad cpu",
      { sizeClasses: { nano: { cpuRequest: "fast", cpuLimit: "1", memoryRequest: "1Mi", memoryLimit: "1Mi" } } },
      'sbx:sizeClasses.nano.cpuRequest: invalid value "fast": use cores',
    ],
    [
      "limit below request",
      { sizeClasses: { nano: { cpuRequest: "2", cpuLimit: "1", memoryRequest: "1Mi", memoryLimit: "1Mi" } } },
      'sbx:sizeClasses.nano.cpuLimit: invalid value "1": must be at least cpuRequest (2)',
    ],
    ["bad budget", { budget: { memory: "lots" } }, 'sbx:budget.memory: invalid value "lots": use a byte quantity'],
    [
      "default size missing",
      { defaults: { size: "huge" } },
      'sbx:defaults.size: invalid value "huge": use one of the size classes: nano, small, medium, large',
    ],
    [
      "ttl above max",
      { defaults: { ttlSeconds: 100, maxTtlSeconds: 50 } },
      "sbx:defaults.ttlSeconds: invalid value 100: must not exceed defaults.maxTtlSeconds (50)",
    ],
    [
      "warm pool profile",
      { warmPool: [{ profile: "gpu", size: "nano", count: 1 }] },
      'sbx:warmPool[0].profile: invalid value "gpu": use one of images.profiles: base, data, web, ml, rl',
    ],
    [
      "warm pool count",
      { warmPool: [{ profile: "base", size: "nano", count: -1 }] },
      "sbx:warmPool[0].count: invalid value -1: use a whole number from 0 to 10000",
    ],
    [
      "metadata egress",
      { egress: [{ cidr: "169.254.169.254/32" }] },
      'sbx:egress[0].cidr: invalid value "169.254.169.254/32": the instance metadata endpoint is never reachable',
    ],
    [
      "sandbox-to-sandbox egress",
      { egress: [{ namespace: "sbx-sandboxes" }] },
      'sbx:egress[0].namespace: invalid value "sbx-sandboxes": sandboxes never reach other sandboxes',
    ],
    [
      "egress with both",
      { egress: [{ cidr: "1.2.3.4/32", namespace: "tools" }] },
      'sbx:egress[0].namespace: invalid value "tools": an egress rule has either cidr or namespace',
    ],
    [
      "egress port",
      { egress: [{ cidr: "1.2.3.4/32", ports: [70000] }] },
      "sbx:egress[0].ports[0]: invalid value 70000: use a whole number from 1 to 65535",
    ],
    [
      "same namespaces",
      { namespaces: { sandbox: "sbx", runtime: "sbx" } },
      'sbx:namespaces.runtime: invalid value "sbx": must differ from namespaces.sandbox',
    ],
    [
      "existing without kubeconfig",
      { mode: "existing-cluster", images: { profiles: ["base"], catalog: { base: "python:3.12" } } },
      "sbx:kubeconfig: invalid value undefined: existing-cluster mode needs the cluster's kubeconfig: `pulumi config set --secret sbx:kubeconfig",
    ],
    [
      "existing without catalog",
      { mode: "existing-cluster", kubeconfig: "(secret)" },
      "sbx:images.catalog: invalid value undefined: existing-cluster mode creates no registries; give an image for every profile (missing: base, data, web, ml, rl)",
    ],
    [
      "catalog for unknown profile",
      { images: { profiles: ["base"], catalog: { gpu: "x" } } },
      'sbx:images.catalog.gpu: invalid value "x": not a profile',
    ],
    [
      "bad node image",
      { runtime: { nodeImage: "node 20" } },
      'sbx:runtime.nodeImage: invalid value "node 20": use an image reference',
    ],
    [
      "blocked cidr",
      { blockedCidrs: ["10.1.0.0/33"] },
      'sbx:blockedCidrs[0]: invalid value "10.1.0.0/33": use an IPv4 CIDR',
    ],
    [
      "user namespaces not a boolean",
      { runtime: { userNamespaces: "yes" } },
      'sbx:runtime.userNamespaces: invalid value "yes": use true or false',
    ],
    [
      "credential duration",
      { runtime: { credentialDurationSeconds: 60 } },
      "sbx:runtime.credentialDurationSeconds: invalid value 60: use a whole number from 900 to 43200",
    ],
    [
      "chained credential duration",
      { runtime: { credentialDurationSeconds: 7200 } },
      "sbx:runtime.credentialDurationSeconds: invalid value 7200: the manager assumes the base role with Pod Identity credentials (role chaining), which STS caps at 3600 seconds",
    ],
  ])("%s", (_label, raw, message) => {
    expect(() => validatePlatformConfig(raw)).toThrow(message);
  });
});

describe("the shipped stacks", () => {
  it.each(["dev", "prod"])("%s validates as an eks stack", (stack) => {
    expect(validatePlatformConfig(stackRaw(stack)).mode).toBe("eks");
  });

  it("local is existing-cluster and names the missing kubeconfig until it is set", () => {
    expect(() => validatePlatformConfig(stackRaw("local"))).toThrow(
      "sbx:kubeconfig: invalid value undefined: existing-cluster mode needs the cluster's kubeconfig",
    );
    expect(validatePlatformConfig(stackRaw("local", { kubeconfig: "(secret)" })).mode).toBe("existing-cluster");
  });

  it("prod holds 1,000 concurrent nano sandboxes on at most 30 sandbox nodes", () => {
    const prod = validatePlatformConfig(stackRaw("prod"));
    const quota = planQuota(prod);
    const nano = 100; // millicores
    expect(quota.requestsCpuMillis).toBeGreaterThanOrEqual(1000 * nano);
    expect(quota.pods).toBeGreaterThanOrEqual(1000);
    const sandbox = planNodeGroups(prod).filter((g) => g.kind === "sandbox");
    expect(sandbox.reduce((n, g) => n + g.maxSize, 0)).toBe(30);
    expect(sandbox.reduce((n, g) => n + g.maxSize * g.maxPods, 0)).toBeGreaterThanOrEqual(quota.pods);
    // 30 × 4 vCPU = 120 ≥ the 110 vCPU budget: no capacity warning
    expect(planSizingWarnings(prod)).toEqual([]);
  });

  it("warns when the budget exceeds what the sandbox nodes can hold", () => {
    const big = validatePlatformConfig({ budget: { cpu: "250", memory: "500Gi" } });
    expect(planSizingWarnings(big)).toEqual([
      "sbx:budget.cpu (250) exceeds the sandbox node groups' 40 vCPUs at maxSize; admitted sandboxes beyond that stay Pending until nodes are added",
      "quota allows 2500 pods but sandbox nodes hold at most 1100 (max pods × maxSize); raise maxSize or enable prefix delegation",
    ]);
  });
});
