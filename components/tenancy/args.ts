// Arguments of the Tenancy component (`sbx:tenancy:Tenancy`).
import type * as pulumi from "@pulumi/pulumi";
import type { EgressRule, SizeClassConfig } from "../shared/platformConfig.ts";

export interface TenancyPlanInput {
  /** The sandbox namespace. Default in stack config: "sbx-sandboxes". */
  namespace: string;
  /** Size classes; the quota's limits and the LimitRange's max/min derive from them. */
  sizeClasses: Record<string, SizeClassConfig>;
  /** Size class whose requests/limits the LimitRange applies to containers that set none. */
  defaultSize: string;
  /**
   * Namespace budget: ResourceQuota requests.cpu / requests.memory. `pods` defaults to
   * floor(cpu / smallest cpuRequest).
   */
  budget: { cpu: string; memory: string; pods?: number };
  /** Allowed egress destinations besides DNS. Default: none (DNS only). */
  egress: EgressRule[];
  /**
   * Ranges cut out of every allowed CIDR (besides the metadata endpoints, which are always
   * cut): the VPC CIDR in eks mode, so 0.0.0.0/0 never reaches nodes or other pods. Default: [].
   */
  blockedCidrs: string[];
}

export interface TenancyArgs extends TenancyPlanInput {
  /** Kubernetes provider of the target cluster. Required. */
  provider: pulumi.ProviderResource;
}
