// Subnet layout for a new VPC. Pure. Private node subnets get the large blocks (prefix
// delegation hands out /28s, so node subnets run out of contiguous space first); public
// subnets (NAT, load balancers) are small and carved from the last block.
import { formatCidr, parseCidr, subnetAt } from "../shared/cidr.ts";

export interface SubnetPlan {
  kind: "private" | "public";
  az: number;
  cidr: string;
  tags: Record<string, string>;
}

export function planSubnets(vpcCidr: string, azCount: number, clusterName: string): SubnetPlan[] {
  const vpc = parseCidr("sbx:network.cidr", vpcCidr);
  const privatePrefix = vpc.prefix + 3; // 8 blocks: up to 6 AZs, the last one hosts public subnets
  const publicPrefix = vpc.prefix + 6;
  const cluster = { [`kubernetes.io/cluster/${clusterName}`]: "shared" };
  const out: SubnetPlan[] = [];
  for (let az = 0; az < azCount; az++) {
    out.push({
      kind: "private",
      az,
      cidr: formatCidr(subnetAt(vpc, privatePrefix, az)),
      tags: { ...cluster, "kubernetes.io/role/internal-elb": "1" },
    });
  }
  for (let az = 0; az < azCount; az++) {
    out.push({
      kind: "public",
      az,
      cidr: formatCidr(subnetAt(vpc, publicPrefix, 7 * 8 + az)),
      tags: { ...cluster, "kubernetes.io/role/elb": "1" },
    });
  }
  return out;
}
