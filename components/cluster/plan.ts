// What the cluster's node side looks like: VPC CNI settings, node groups with labels, taints
// and max pods, and the nodeadm user data that applies max pods. Pure.
import { SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "../../runtime/k8s/contract.ts";
import type { NodeGroupConfig, PlatformConfig } from "../shared/platformConfig.ts";
import { computeMaxPods, resolveInstanceLimits } from "./maxPods.ts";

export const NODE_ROLE_LABEL = "sbx.dev/node-role";
export const SYSTEM_NODE_SELECTOR = { [NODE_ROLE_LABEL]: "system" } as const;
export const GPU_TAINT = { key: "nvidia.com/gpu", value: "true", effect: "NoSchedule" } as const;

export type NodeGroupKind = "system" | "sandbox" | "gpu";

/** Taint effects in the EKS API spell differently from Kubernetes. */
const EKS_EFFECT: Record<string, string> = {
  NoSchedule: "NO_SCHEDULE",
  NoExecute: "NO_EXECUTE",
  PreferNoSchedule: "PREFER_NO_SCHEDULE",
};

export interface NodeGroupPlan {
  kind: NodeGroupKind;
  name: string;
  instanceType: string;
  amiType: "AL2023_x86_64_STANDARD" | "AL2023_x86_64_NVIDIA";
  minSize: number;
  maxSize: number;
  desiredSize: number;
  diskSizeGiB: number;
  maxPods: number;
  labels: Record<string, string>;
  /** in EKS API form (effect NO_SCHEDULE) */
  taints: { key: string; value: string; effect: string }[];
}

/** The vpc-cni addon's configurationValues: prefix delegation and network policy enforcement. */
export function planVpcCniConfiguration(cni: PlatformConfig["vpcCni"]): Record<string, unknown> {
  return {
    env: {
      ENABLE_PREFIX_DELEGATION: String(cni.prefixDelegation),
      WARM_PREFIX_TARGET: String(cni.warmPrefixTarget),
    },
    enableNetworkPolicy: String(cni.networkPolicy),
  };
}

function eksTaint(t: { key: string; value: string; effect: string }) {
  return { key: t.key, value: t.value, effect: EKS_EFFECT[t.effect] ?? t.effect };
}

function planGroup(kind: NodeGroupKind, field: string, g: NodeGroupConfig, prefixDelegation: boolean): NodeGroupPlan {
  const limits = resolveInstanceLimits(`${field}.instanceType`, g.instanceType, g.networkLimits);
  const labels: Record<string, string> =
    kind === "system"
      ? { ...SYSTEM_NODE_SELECTOR }
      : kind === "sandbox"
        ? { [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value }
        : { [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value, "sbx.dev/accelerator": "nvidia" };
  // GPU nodes carry both taints: only sandboxes that asked for a GPU tolerate the second.
  const taints =
    kind === "system"
      ? []
      : kind === "sandbox"
        ? [eksTaint(SANDBOX_NODE_TAINT)]
        : [eksTaint(SANDBOX_NODE_TAINT), eksTaint(GPU_TAINT)];
  return {
    kind,
    name: g.name,
    instanceType: g.instanceType,
    amiType: kind === "gpu" ? "AL2023_x86_64_NVIDIA" : "AL2023_x86_64_STANDARD",
    minSize: g.minSize,
    maxSize: g.maxSize,
    desiredSize: g.desiredSize,
    diskSizeGiB: g.diskSizeGiB,
    maxPods: computeMaxPods(limits, prefixDelegation),
    labels,
    taints,
  };
}

export function planNodeGroups(cfg: Pick<PlatformConfig, "nodeGroups" | "vpcCni">): NodeGroupPlan[] {
  const pd = cfg.vpcCni.prefixDelegation;
  const groups = [
    planGroup("system", "sbx:nodeGroups.system", cfg.nodeGroups.system, pd),
    ...cfg.nodeGroups.sandbox.map((g, i) => planGroup("sandbox", `sbx:nodeGroups.sandbox[${i}]`, g, pd)),
  ];
  if (cfg.nodeGroups.gpu) groups.push(planGroup("gpu", "sbx:nodeGroups.gpu", cfg.nodeGroups.gpu, pd));
  return groups;
}

/**
 * AL2023 nodes boot with nodeadm; EKS merges this NodeConfig part with its own (cluster
 * endpoint, CA), so only kubelet's maxPods is ours. Without it nodeadm would compute the
 * no-prefix-delegation default (58 on m7i.xlarge) and waste the prefixes.
 */
export function renderNodeUserData(maxPods: number): string {
  const boundary = "==SBXBOUNDARY==";
  return [
    "MIME-Version: 1.0",
    `Content-Type: multipart/mixed; boundary="${boundary}"`,
    "",
    `--${boundary}`,
    "Content-Type: application/node.eks.aws",
    "",
    "---",
    "apiVersion: node.eks.aws/v1alpha1",
    "kind: NodeConfig",
    "spec:",
    "  kubelet:",
    "    config:",
    `      maxPods: ${maxPods}`,
    "",
    `--${boundary}--`,
    "",
  ].join("\n");
}

/** Sandbox capacity the node groups can ever offer, for the budget sanity warning. */
export function sandboxCapacity(
  groups: NodeGroupPlan[],
  vcpusOf: (instanceType: string) => number,
): { vcpus: number; pods: number } {
  const sandbox = groups.filter((g) => g.kind === "sandbox");
  return {
    vcpus: sandbox.reduce((n, g) => n + g.maxSize * vcpusOf(g.instanceType), 0),
    pods: sandbox.reduce((n, g) => n + g.maxSize * g.maxPods, 0),
  };
}
