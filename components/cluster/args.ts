// Arguments of the Cluster component (`sbx:cluster:Cluster`).
import type * as pulumi from "@pulumi/pulumi";
import type { PlatformConfig } from "../shared/platformConfig.ts";

export interface ClusterArgs {
  /** EKS cluster name. Required. */
  clusterName: string;
  /**
   * version (default "1.33", pinned), admins (IAM principals given cluster-admin access
   * entries; default none), logTypes (default api, audit, authenticator), endpoint access
   * (public and private on by default; publicAccessCidrs default 0.0.0.0/0).
   */
  cluster: PlatformConfig["cluster"];
  /** prefixDelegation (default true), warmPrefixTarget (default 1), networkPolicy (must be true). */
  vpcCni: PlatformConfig["vpcCni"];
  /** system (m7i.large 2-4), sandbox groups (m7i.xlarge 1-10), optional gpu (g5.xlarge 0-2). */
  nodeGroups: PlatformConfig["nodeGroups"];
  vpcId: pulumi.Input<string>;
  privateSubnetIds: pulumi.Input<string[]>;
  publicSubnetIds: pulumi.Input<string[]>;
  /** Images the pre-pull DaemonSet pulls on every sandbox node; unset = no DaemonSet. */
  prePullImages?: pulumi.Input<string[]>;
}
