// What the sandbox namespace contains: PSA labels, the ResourceQuota derived from the
// budget and size classes, a LimitRange, and NetworkPolicies. Pure: returns plain objects.

import { ValidationError } from "../../runtime/core/errors.ts";
import { formatCpu, formatMemory, parseCpu, parseMemory } from "../../runtime/core/quantity.ts";
import { cidrContains, parseCidr } from "../shared/cidr.ts";
import { type K8sObject, partOf } from "../shared/k8s.ts";
import type { TenancyPlanInput } from "./args.ts";

/** Never reachable from a sandbox: the EC2 instance metadata service and the EKS Pod Identity agent. */
export const ALWAYS_BLOCKED_CIDRS = ["169.254.169.254/32", "169.254.170.23/32"] as const;

export interface QuotaPlan {
  requestsCpuMillis: number;
  limitsCpuMillis: number;
  requestsMemoryBytes: number;
  limitsMemoryBytes: number;
  pods: number;
}

/**
 * Requests equal the budget (the runtime admits against the same numbers). Limits are the
 * budget scaled by the largest limit/request ratio among the size classes, so any mix the
 * request budget admits also fits the limits quota. Pods default to the budget divided by
 * the smallest CPU request: the most sandboxes the budget can ever hold.
 */
export function planQuota(input: Pick<TenancyPlanInput, "budget" | "sizeClasses">): QuotaPlan {
  const cpu = parseCpu("budget.cpu", input.budget.cpu);
  const mem = parseMemory("budget.memory", input.budget.memory);
  const classes = Object.entries(input.sizeClasses).map(([name, s]) => ({
    cpuReq: parseCpu(`sizeClasses.${name}.cpuRequest`, s.cpuRequest),
    cpuLim: parseCpu(`sizeClasses.${name}.cpuLimit`, s.cpuLimit),
    memReq: parseMemory(`sizeClasses.${name}.memoryRequest`, s.memoryRequest),
    memLim: parseMemory(`sizeClasses.${name}.memoryLimit`, s.memoryLimit),
  }));
  if (classes.length === 0) throw new ValidationError("sizeClasses", {}, "define at least one size class");
  const limitsCpuMillis = Math.max(...classes.map((c) => Math.ceil((cpu * c.cpuLim) / c.cpuReq)));
  const limitsMemoryBytes = Math.max(...classes.map((c) => Math.ceil((mem * c.memLim) / c.memReq)));
  const pods = input.budget.pods ?? Math.floor(cpu / Math.min(...classes.map((c) => c.cpuReq)));
  return {
    requestsCpuMillis: cpu,
    limitsCpuMillis,
    requestsMemoryBytes: mem,
    limitsMemoryBytes: roundUpMi(limitsMemoryBytes),
    pods,
  };
}

function roundUpMi(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20) * 2 ** 20;
}

/** `except` entries for an allowed CIDR: every blocked range strictly inside it. */
export function planExcepts(allowed: string, blocked: readonly string[]): string[] {
  const a = parseCidr("egress.cidr", allowed);
  return blocked.filter((b) => {
    const c = parseCidr("blockedCidrs", b);
    return cidrContains(a, c) && c.prefix > a.prefix;
  });
}

// Over 60 lines on purpose: the namespace's objects as plain literals, as Kubernetes reads them.
export function renderTenancy(input: TenancyPlanInput): K8sObject[] {
  const ns = input.namespace;
  const labels = partOf("tenancy");
  const q = planQuota(input);
  const def = input.sizeClasses[input.defaultSize];
  if (!def)
    throw new ValidationError(
      "defaults.size",
      input.defaultSize,
      `use one of: ${Object.keys(input.sizeClasses).join(", ")}`,
    );
  const sizes = Object.values(input.sizeClasses);
  const maxOf = (f: (s: (typeof sizes)[number]) => number) => Math.max(...sizes.map(f));
  const minOf = (f: (s: (typeof sizes)[number]) => number) => Math.min(...sizes.map(f));
  const meta = (name: string) => ({ name, namespace: ns, labels });
  const psa = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
  };
  const blocked = [...ALWAYS_BLOCKED_CIDRS, ...input.blockedCidrs];
  const objects: K8sObject[] = [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: ns, labels: { ...labels, ...psa } } },
    {
      apiVersion: "v1",
      kind: "ResourceQuota",
      metadata: meta("sandbox-budget"),
      spec: {
        hard: {
          "requests.cpu": formatCpu(q.requestsCpuMillis),
          "limits.cpu": formatCpu(q.limitsCpuMillis),
          "requests.memory": formatMemory(q.requestsMemoryBytes),
          "limits.memory": formatMemory(q.limitsMemoryBytes),
          pods: String(q.pods),
        },
      },
    },
    {
      apiVersion: "v1",
      kind: "LimitRange",
      metadata: meta("sandbox-defaults"),
      spec: {
        limits: [
          {
            type: "Container",
            default: { cpu: def.cpuLimit, memory: def.memoryLimit },
            defaultRequest: { cpu: def.cpuRequest, memory: def.memoryRequest },
            max: {
              cpu: formatCpu(maxOf((s) => parseCpu("cpuLimit", s.cpuLimit))),
              memory: formatMemory(maxOf((s) => parseMemory("memoryLimit", s.memoryLimit))),
            },
            min: {
              cpu: formatCpu(minOf((s) => parseCpu("cpuRequest", s.cpuRequest))),
              memory: formatMemory(minOf((s) => parseMemory("memoryRequest", s.memoryRequest))),
            },
          },
        ],
      },
    },
    // NetworkPolicies only add allowances; with this one selecting every pod both ways,
    // sandbox-to-sandbox traffic and ingress from anywhere are denied.
    {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: meta("default-deny"),
      spec: { podSelector: {}, policyTypes: ["Ingress", "Egress"] },
    },
    {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: meta("allow-dns"),
      spec: {
        podSelector: {},
        policyTypes: ["Egress"],
        egress: [
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
        ],
      },
    },
  ];
  if (input.egress.length > 0) {
    objects.push({
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: meta("allow-egress"),
      spec: {
        podSelector: {},
        policyTypes: ["Egress"],
        egress: input.egress.map((rule) => {
          const ports = rule.ports.length ? { ports: rule.ports.map((port) => ({ protocol: "TCP", port })) } : {};
          if (rule.kind === "cidr") {
            const except = planExcepts(rule.cidr, blocked);
            return { to: [{ ipBlock: { cidr: rule.cidr, ...(except.length ? { except } : {}) } }], ...ports };
          }
          return {
            to: [
              {
                namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": rule.namespace } },
                podSelector: { matchLabels: rule.podLabels },
              },
            ],
            ...ports,
          };
        }),
      },
    });
  }
  return objects;
}
