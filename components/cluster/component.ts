// sbx:cluster:Cluster — EKS (via @pulumi/eks) with access entries, the VPC CNI configured
// for prefix delegation and network policy BEFORE any node group, managed node groups
// whose max pods come from maxPods.ts, Pod Identity, CoreDNS, and the image pre-pull.
import * as aws from "@pulumi/aws";
import * as eks from "@pulumi/eks";
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { NODE_MANAGED_POLICIES, nodeTrustPolicy } from "../identity/policies.ts";
import { logicalName } from "../shared/createObject.ts";
import type { ClusterArgs } from "./args.ts";
import { type NodeGroupPlan, planNodeGroups, planVpcCniConfiguration, renderNodeUserData } from "./plan.ts";
import { renderPrePullDaemonSet } from "./prePull.ts";

/** kube-system exists on every cluster and is exempt from our PSA labels; nothing to order against. */
const PREPULL_NAMESPACE = "kube-system";
const CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy";

export class Cluster extends pulumi.ComponentResource {
  readonly clusterName: pulumi.Output<string>;
  readonly kubeconfig: pulumi.Output<string>;
  /** EKS's OIDC issuer URL: the iss of the cluster's service-account tokens */
  readonly oidcIssuer: pulumi.Output<string>;
  readonly provider: k8s.Provider;
  readonly nodeGroups: NodeGroupPlan[];

  // Over 60 lines on purpose: creates what plan.ts decided, in the order EKS needs it (CNI before node groups).
  constructor(name: string, args: ClusterArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:cluster:Cluster", name, {}, opts);
    const plans = planNodeGroups(args); // throws on unknown instance types before any resource
    const parent = { parent: this };
    const c = args.cluster;

    const cluster = new eks.Cluster(
      `${name}-eks`,
      {
        name: args.clusterName,
        version: c.version,
        vpcId: args.vpcId,
        privateSubnetIds: args.privateSubnetIds,
        publicSubnetIds: args.publicSubnetIds,
        authenticationMode: eks.AuthenticationMode.Api,
        accessEntries: Object.fromEntries(
          c.admins.map((arn, i) => [
            `admin-${i}`,
            {
              principalArn: arn,
              accessPolicies: { admin: { policyArn: CLUSTER_ADMIN_POLICY, accessScope: { type: "cluster" } } },
            },
          ]),
        ),
        enabledClusterLogTypes: c.logTypes,
        endpointPublicAccess: c.endpointPublicAccess,
        endpointPrivateAccess: c.endpointPrivateAccess,
        publicAccessCidrs: c.endpointPublicAccess ? c.publicAccessCidrs : undefined,
        skipDefaultNodeGroup: true,
        // the vpc-cni addon below owns the CNI config; CoreDNS waits for the system nodes
        useDefaultVpcCni: true,
        corednsAddonOptions: { enabled: false },
        createOidcProvider: false,
      },
      parent,
    );
    this.clusterName = cluster.eksCluster.apply((ec) => ec.name);
    // the iss of the cluster's service-account tokens; its discovery and keys are public
    this.oidcIssuer = cluster.eksCluster.apply((ec) => ec.identities?.[0]?.oidcs?.[0]?.issuer ?? "");
    this.kubeconfig = cluster.kubeconfigJson;

    const addon = (addonName: string, extra: Partial<aws.eks.AddonArgs> = {}, deps: pulumi.Resource[] = []) =>
      new aws.eks.Addon(
        `${name}-${addonName}`,
        {
          clusterName: this.clusterName,
          addonName,
          resolveConflictsOnCreate: "OVERWRITE",
          resolveConflictsOnUpdate: "OVERWRITE",
          ...extra,
        },
        { parent: this, dependsOn: deps },
      );
    const vpcCni = addon("vpc-cni", { configurationValues: JSON.stringify(planVpcCniConfiguration(args.vpcCni)) });
    const podIdentity = addon("eks-pod-identity-agent");

    const nodeRole = new aws.iam.Role(`${name}-node`, { assumeRolePolicy: JSON.stringify(nodeTrustPolicy()) }, parent);
    const attachments = NODE_MANAGED_POLICIES.map(
      (arn, i) =>
        new aws.iam.RolePolicyAttachment(`${name}-node-${i}`, { role: nodeRole.name, policyArn: arn }, parent),
    );
    this.nodeGroups = plans;
    const groups = plans.map((p) => this.nodeGroup(name, p, args, nodeRole, [vpcCni, podIdentity, ...attachments]));
    const coredns = addon(
      "coredns",
      {},
      groups.filter((_, i) => plans[i].kind === "system"),
    );

    // Kubernetes objects wait for working nodes (CoreDNS ACTIVE implies system nodes run pods),
    // so the runtime's Deployments don't spend their rollout timeout waiting for EC2.
    this.provider = new k8s.Provider(
      `${name}-k8s`,
      { kubeconfig: this.kubeconfig, enableServerSideApply: true },
      { parent: this, dependsOn: [coredns] },
    );
    if (args.prePullImages) {
      // the image list is an Output (ECR URIs), so only the spec waits for it
      const shape = renderPrePullDaemonSet(PREPULL_NAMESPACE, []);
      const rendered = pulumi
        .output(args.prePullImages)
        .apply((images) => renderPrePullDaemonSet(PREPULL_NAMESPACE, images));
      new k8s.apps.v1.DaemonSet(
        logicalName(name, shape),
        { metadata: shape.metadata, spec: rendered.apply((d) => d.spec as k8s.types.input.apps.v1.DaemonSetSpec) },
        { parent: this, provider: this.provider, dependsOn: groups },
      );
    }
    this.registerOutputs({ clusterName: this.clusterName, kubeconfig: pulumi.secret(this.kubeconfig) });
  }

  /** A launch template (max pods, IMDSv2 with hop limit 1, encrypted disk) and its managed node group. */
  private nodeGroup(
    name: string,
    p: NodeGroupPlan,
    args: ClusterArgs,
    role: aws.iam.Role,
    deps: pulumi.Resource[],
  ): aws.eks.NodeGroup {
    const lt = new aws.ec2.LaunchTemplate(
      `${name}-${p.name}`,
      {
        userData: Buffer.from(renderNodeUserData(p.maxPods)).toString("base64"),
        // hop limit 1: pods (one hop further than the node) cannot reach instance metadata
        metadataOptions: { httpEndpoint: "enabled", httpTokens: "required", httpPutResponseHopLimit: 1 },
        blockDeviceMappings: [
          {
            deviceName: "/dev/xvda",
            ebs: { volumeSize: p.diskSizeGiB, volumeType: "gp3", encrypted: "true", deleteOnTermination: "true" },
          },
        ],
        tagSpecifications: [{ resourceType: "instance", tags: { Name: `${args.clusterName}-${p.name}` } }],
      },
      { parent: this },
    );
    return new aws.eks.NodeGroup(
      `${name}-${p.name}`,
      {
        clusterName: this.clusterName,
        nodeGroupName: `${args.clusterName}-${p.name}`,
        nodeRoleArn: role.arn,
        subnetIds: args.privateSubnetIds,
        instanceTypes: [p.instanceType],
        amiType: p.amiType,
        capacityType: "ON_DEMAND",
        scalingConfig: { minSize: p.minSize, maxSize: p.maxSize, desiredSize: p.desiredSize },
        updateConfig: { maxUnavailable: 1 },
        labels: p.labels,
        taints: p.taints,
        launchTemplate: { id: lt.id, version: lt.latestVersion.apply(String) },
      },
      { parent: this, dependsOn: deps, ignoreChanges: ["scalingConfig.desiredSize"] },
    );
  }
}
