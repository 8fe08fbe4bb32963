// Arguments of the Network component (`sbx:network:Network`).
import type { NetworkConfig } from "../shared/platformConfig.ts";

export interface NetworkArgs {
  /**
   * `create`: a VPC of `cidr` (default "10.0.0.0/16") with private node subnets and small
   * public subnets in `azCount` AZs (default 2, at least 2), NAT gateways ("single" default,
   * or "perAz"). `existing`: the given vpcId and subnet ids are used as they are.
   */
  network: NetworkConfig;
  /** EKS cluster name, for the `kubernetes.io/cluster/<name>` subnet tags. Required. */
  clusterName: string;
}
