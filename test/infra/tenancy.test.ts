import { describe, expect, it } from "vitest";
import type { TenancyPlanInput } from "../../components/tenancy/args.ts";
import { planExcepts, planQuota, renderTenancy } from "../../components/tenancy/plan.ts";
import { DEFAULT_SIZE_CLASSES } from "../../runtime/config/schema.ts";

const base: TenancyPlanInput = {
  namespace: "sbx-sandboxes",
  sizeClasses: structuredClone(DEFAULT_SIZE_CLASSES) as TenancyPlanInput["sizeClasses"],
  defaultSize: "nano",
  budget: { cpu: "250", memory: "1000Gi" },
  egress: [],
  blockedCidrs: ["10.0.0.0/16"],
};

describe("planQuota", () => {
  it.each([
    // budget, expected quota
    [
      { cpu: "250", memory: "1000Gi" },
      {
        requestsCpuMillis: 250_000,
        limitsCpuMillis: 2_500_000,
        requestsMemoryBytes: 1000 * 2 ** 30,
        limitsMemoryBytes: 4000 * 2 ** 30,
        pods: 2500,
      },
    ],
    [
      { cpu: "110", memory: "400Gi" },
      {
        requestsCpuMillis: 110_000,
        limitsCpuMillis: 1_100_000,
        requestsMemoryBytes: 400 * 2 ** 30,
        limitsMemoryBytes: 1600 * 2 ** 30,
        pods: 1100,
      },
    ],
    [
      { cpu: "4", memory: "8Gi", pods: 10 },
      {
        requestsCpuMillis: 4000,
        limitsCpuMillis: 40_000,
        requestsMemoryBytes: 8 * 2 ** 30,
        limitsMemoryBytes: 32 * 2 ** 30,
        pods: 10,
      },
    ],
  ])("budget %j", (budget, expected) => {
    expect(planQuota({ ...base, budget })).toEqual(expected);
  });

  it("limits follow the largest limit/request ratio among the classes", () => {
    const sizeClasses = {
      only: {
        cpuRequest: "1",
        cpuLimit: "2",
        memoryRequest: "1Gi",
        memoryLimit: "1Gi",
        workspace: "1Gi",
        tmp: "1Gi",
        pids: 100,
      },
    };
    expect(planQuota({ budget: { cpu: "10", memory: "10Gi" }, sizeClasses })).toMatchObject({
      limitsCpuMillis: 20_000,
      limitsMemoryBytes: 10 * 2 ** 30,
      pods: 10,
    });
  });
});

describe("renderTenancy", () => {
  const byName = (input: TenancyPlanInput) =>
    Object.fromEntries(renderTenancy(input).map((o) => [`${o.kind}/${o.metadata.name}`, o as any]));

  it("labels the namespace for PSA restricted", () => {
    expect(byName(base)["Namespace/sbx-sandboxes"].metadata.labels).toMatchObject({
      "pod-security.kubernetes.io/enforce": "restricted",
      "pod-security.kubernetes.io/enforce-version": "latest",
    });
  });

  it("default-denies both directions and allows DNS to kube-dns only", () => {
    const o = byName(base);
    expect(o["NetworkPolicy/default-deny"].spec).toEqual({ podSelector: {}, policyTypes: ["Ingress", "Egress"] });
    expect(o["NetworkPolicy/allow-dns"].spec.egress).toEqual([
      {
        to: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } },
            podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
          },
        ],
        ports: [
          { protocol: "UDP", port: 53 },
          { protocol: "TCP", port: 53 },
        ],
      },
    ]);
    expect(o["NetworkPolicy/allow-egress"]).toBeUndefined();
    // nothing ever allows ingress into the sandbox namespace
    for (const obj of renderTenancy(base)) expect((obj as any).spec?.ingress).toBeUndefined();
  });

  it("renders the egress allow-list with metadata and VPC cut out", () => {
    const o = byName({
      ...base,
      egress: [
        { kind: "cidr", cidr: "0.0.0.0/0", ports: [443] },
        { kind: "cidr", cidr: "10.0.5.10/32", ports: [] },
        { kind: "pods", namespace: "tools", podLabels: { app: "tool-gateway" }, ports: [8080] },
      ],
    });
    expect(o["NetworkPolicy/allow-egress"].spec.egress).toEqual([
      {
        to: [{ ipBlock: { cidr: "0.0.0.0/0", except: ["169.254.169.254/32", "169.254.170.23/32", "10.0.0.0/16"] } }],
        ports: [{ protocol: "TCP", port: 443 }],
      },
      { to: [{ ipBlock: { cidr: "10.0.5.10/32" } }] },
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

  it("LimitRange defaults to the default class and bounds by all classes", () => {
    expect(byName(base)["LimitRange/sandbox-defaults"].spec.limits[0]).toEqual({
      type: "Container",
      default: { cpu: "1", memory: "512Mi" },
      defaultRequest: { cpu: "100m", memory: "128Mi" },
      max: { cpu: "4", memory: "16Gi" },
      min: { cpu: "100m", memory: "128Mi" },
    });
  });

  it.each([
    ["169.254.0.0/16", ["169.254.169.254/32", "169.254.170.23/32"]],
    ["10.0.0.0/8", ["10.0.0.0/16"]],
    ["10.0.0.0/16", []], // equal ranges are not an `except` (it would have to be strictly inside)
    ["192.168.0.0/16", []],
  ])("planExcepts(%s)", (cidr, expected) => {
    expect(planExcepts(cidr, ["169.254.169.254/32", "169.254.170.23/32", "10.0.0.0/16"])).toEqual(expected);
  });
});
