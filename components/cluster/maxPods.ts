// Max pods per node from an instance type's network limits. Pure.
//
// Without prefix delegation each secondary IP of each ENI is one pod IP:
//   ENIs × (IPs per ENI − 1) + 2        (the +2 are host-network pods: aws-node, kube-proxy)
// With prefix delegation every secondary IP slot holds a /28 prefix (16 addresses):
//   ENIs × (IPs per ENI − 1) × 16 + 2, capped by the kubelet's practical limits that EKS
//   recommends: 110 below 30 vCPUs, 250 from 30 vCPUs.
// m7i.xlarge (4 ENIs, 15 IPs, 4 vCPU): 58 without, min(898, 110) = 110 with.
import { ValidationError } from "../../runtime/core/errors.ts";
import type { InstanceNetworkLimits } from "../shared/platformConfig.ts";

export type { InstanceNetworkLimits };

/** EC2 limits for the instance types our stacks use (from the EC2 instance type docs). */
export const INSTANCE_LIMITS: Readonly<Record<string, InstanceNetworkLimits>> = {
  "t3.medium": { vcpus: 2, maxEnis: 3, ipsPerEni: 6 },
  "t3.large": { vcpus: 2, maxEnis: 3, ipsPerEni: 12 },
  "t3.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "m5.large": { vcpus: 2, maxEnis: 3, ipsPerEni: 10 },
  "m5.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "m6i.large": { vcpus: 2, maxEnis: 3, ipsPerEni: 10 },
  "m6i.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "m7i.large": { vcpus: 2, maxEnis: 3, ipsPerEni: 10 },
  "m7i.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "m7i.2xlarge": { vcpus: 8, maxEnis: 4, ipsPerEni: 15 },
  "m7i.4xlarge": { vcpus: 16, maxEnis: 8, ipsPerEni: 30 },
  "m7i.8xlarge": { vcpus: 32, maxEnis: 8, ipsPerEni: 30 },
  "c7i.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "c7i.2xlarge": { vcpus: 8, maxEnis: 4, ipsPerEni: 15 },
  "r7i.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "g5.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
  "g5.2xlarge": { vcpus: 8, maxEnis: 4, ipsPerEni: 15 },
  "g6.xlarge": { vcpus: 4, maxEnis: 4, ipsPerEni: 15 },
};

export const PREFIX_ADDRESSES = 16;
export const MAX_PODS_CAP_SMALL = 110;
export const MAX_PODS_CAP_LARGE = 250;
export const LARGE_INSTANCE_VCPUS = 30;

export function computeMaxPods(limits: InstanceNetworkLimits, prefixDelegation: boolean): number {
  const slots = limits.maxEnis * (limits.ipsPerEni - 1);
  if (!prefixDelegation) return slots + 2;
  const cap = limits.vcpus < LARGE_INSTANCE_VCPUS ? MAX_PODS_CAP_SMALL : MAX_PODS_CAP_LARGE;
  return Math.min(slots * PREFIX_ADDRESSES + 2, cap);
}

/** Limits for an instance type: the explicit override wins, else the table; unknown types fail. */
export function resolveInstanceLimits(
  field: string,
  instanceType: string,
  override?: InstanceNetworkLimits,
): InstanceNetworkLimits {
  if (override) return { ...override };
  const known = INSTANCE_LIMITS[instanceType];
  if (!known) {
    throw new ValidationError(
      field,
      instanceType,
      `unknown instance type; use one of ${Object.keys(INSTANCE_LIMITS).join(", ")} or set "networkLimits": {"vcpus", "maxEnis", "ipsPerEni"} on the node group`,
    );
  }
  return { ...known };
}
