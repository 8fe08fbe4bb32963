import { describe, expect, it } from "vitest";
import { computeMaxPods, INSTANCE_LIMITS, resolveInstanceLimits } from "../../components/cluster/maxPods.ts";
import { planNodeGroups, planVpcCniConfiguration, renderNodeUserData } from "../../components/cluster/plan.ts";
import { eksConfig } from "./fixtures.ts";

describe("computeMaxPods", () => {
  it.each([
    // type, without prefix delegation, with
    ["m7i.xlarge", 58, 110], // 4 × 14 + 2; 4 × 14 × 16 + 2 = 898 → capped at 110 (< 30 vCPU)
    ["m7i.large", 29, 110],
    ["t3.medium", 17, 110],
    ["m7i.4xlarge", 234, 110], // 16 vCPU: still the 110 cap
    ["m7i.8xlarge", 234, 250], // 32 vCPU: the 250 cap
  ])("%s: %i without, %i with prefix delegation", (type, without, withPd) => {
    const limits = resolveInstanceLimits("instanceType", type);
    expect(computeMaxPods(limits, false)).toBe(without);
    expect(computeMaxPods(limits, true)).toBe(withPd);
  });

  it("uses the uncapped prefix formula when it is below the cap", () => {
    expect(computeMaxPods({ vcpus: 2, maxEnis: 1, ipsPerEni: 4 }, true)).toBe(1 * 3 * 16 + 2);
  });

  it("an explicit override wins over the table; an unknown type fails with the fix", () => {
    expect(resolveInstanceLimits("x", "m7i.xlarge", { vcpus: 64, maxEnis: 15, ipsPerEni: 50 })).toEqual({
      vcpus: 64,
      maxEnis: 15,
      ipsPerEni: 50,
    });
    expect(() => resolveInstanceLimits("sbx:nodeGroups.sandbox[0].instanceType", "z9.huge")).toThrow(
      'sbx:nodeGroups.sandbox[0].instanceType: invalid value "z9.huge": unknown instance type; use one of',
    );
    expect(Object.keys(INSTANCE_LIMITS)).toContain("m7i.xlarge");
  });
});

describe("node group plan", () => {
  it("applies prefix-delegation max pods to every group and the no-PD value when disabled", () => {
    expect(planNodeGroups(eksConfig()).map((g) => [g.name, g.maxPods])).toEqual([
      ["system", 110],
      ["sandbox", 110],
      ["gpu", 110],
    ]);
    const noPd = eksConfig({ vpcCni: { prefixDelegation: false } });
    expect(planNodeGroups(noPd).map((g) => g.maxPods)).toEqual([29, 58, 58]);
    expect(planVpcCniConfiguration(noPd.vpcCni)).toEqual({
      env: { ENABLE_PREFIX_DELEGATION: "false", WARM_PREFIX_TARGET: "1" },
      enableNetworkPolicy: "true",
    });
  });

  it("renders a nodeadm NodeConfig MIME part with kubelet maxPods", () => {
    const ud = renderNodeUserData(110);
    expect(ud).toContain("Content-Type: application/node.eks.aws");
    expect(ud).toContain("kind: NodeConfig");
    expect(ud).toMatch(/kubelet:\n\s+config:\n\s+maxPods: 110\n/);
  });
});
