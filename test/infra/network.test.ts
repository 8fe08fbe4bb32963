import { describe, expect, it } from "vitest";
import { planSubnets } from "../../components/network/plan.ts";
import { cidrContains, formatCidr, parseCidr, subnetAt } from "../../components/shared/cidr.ts";
import { installMocks, ofType, resetCaptured, settle } from "./mocks.ts";

installMocks();
const { Network } = await import("../../components/network/component.ts");

describe("planSubnets", () => {
  it("gives nodes /19s and load balancers /22s from the last block of a /16", () => {
    expect(planSubnets("10.0.0.0/16", 3, "sbx-prod").map((s) => [s.kind, s.az, s.cidr])).toEqual([
      ["private", 0, "10.0.0.0/19"],
      ["private", 1, "10.0.32.0/19"],
      ["private", 2, "10.0.64.0/19"],
      ["public", 0, "10.0.224.0/22"],
      ["public", 1, "10.0.228.0/22"],
      ["public", 2, "10.0.232.0/22"],
    ]);
  });

  it("tags subnets for EKS load balancers and the cluster", () => {
    const [priv, pub] = [planSubnets("10.0.0.0/16", 2, "c")[0], planSubnets("10.0.0.0/16", 2, "c")[2]];
    expect(priv.tags).toEqual({ "kubernetes.io/cluster/c": "shared", "kubernetes.io/role/internal-elb": "1" });
    expect(pub.tags).toEqual({ "kubernetes.io/cluster/c": "shared", "kubernetes.io/role/elb": "1" });
  });

  it.each([2, 3, 4, 5, 6])("never overlaps and stays inside a /20 VPC with %i AZs", (azs) => {
    const vpc = parseCidr("vpc", "10.8.0.0/20");
    const subnets = planSubnets("10.8.0.0/20", azs, "c").map((s) => parseCidr("s", s.cidr));
    for (const [i, a] of subnets.entries()) {
      expect(cidrContains(vpc, a)).toBe(true);
      for (const b of subnets.slice(i + 1)) expect(cidrContains(a, b) || cidrContains(b, a)).toBe(false);
    }
  });

  it("cidr helpers", () => {
    expect(formatCidr(subnetAt(parseCidr("x", "10.0.0.0/16"), 24, 5))).toBe("10.0.5.0/24");
    expect(() => subnetAt(parseCidr("x", "10.0.0.0/16"), 17, 2)).toThrow("cannot carve subnet #2 of /17");
    expect(cidrContains(parseCidr("a", "0.0.0.0/0"), parseCidr("b", "169.254.169.254/32"))).toBe(true);
  });
});

describe("Network component", () => {
  it("create mode: VPC, subnets per AZ, one NAT per AZ when asked", async () => {
    resetCaptured();
    new Network("net", {
      network: { mode: "create", cidr: "10.0.0.0/16", azCount: 3, natGateways: "perAz" },
      clusterName: "c",
    });
    const r = await settle();
    expect(ofType(r, "aws:ec2/vpc:Vpc")[0].inputs).toMatchObject({
      cidrBlock: "10.0.0.0/16",
      enableDnsHostnames: true,
    });
    expect(
      ofType(r, "aws:ec2/subnet:Subnet").map((s) => [
        s.inputs.cidrBlock,
        s.inputs.availabilityZone,
        s.inputs.mapPublicIpOnLaunch,
      ]),
    ).toEqual([
      ["10.0.224.0/22", "us-east-1a", true],
      ["10.0.228.0/22", "us-east-1b", true],
      ["10.0.232.0/22", "us-east-1c", true],
      ["10.0.0.0/19", "us-east-1a", false],
      ["10.0.32.0/19", "us-east-1b", false],
      ["10.0.64.0/19", "us-east-1c", false],
    ]);
    expect(ofType(r, "aws:ec2/natGateway:NatGateway")).toHaveLength(3);
    expect(ofType(r, "aws:ec2/routeTableAssociation:RouteTableAssociation")).toHaveLength(6);
  });

  it("existing mode passes the ids through and creates nothing", async () => {
    resetCaptured();
    const n = new Network("net", {
      network: {
        mode: "existing",
        vpcId: "vpc-0123456789abcdef0",
        cidr: "10.0.0.0/16",
        privateSubnetIds: ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
        publicSubnetIds: [],
      },
      clusterName: "c",
    });
    const r = await settle();
    expect(r.map((x) => x.type)).toEqual(["sbx:network:Network"]);
    expect(await new Promise((res) => n.privateSubnetIds.apply(res))).toEqual([
      "subnet-0123456789abcdef0",
      "subnet-0123456789abcdef1",
    ]);
  });
});
