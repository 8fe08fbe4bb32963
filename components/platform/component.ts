// sbx:platform:SandboxPlatform — composes the platform. `eks` mode: Network, ImageProfiles,
// Identity, Cluster, Tenancy, Runtime. `existing-cluster` mode: Tenancy and Runtime only,
// on whatever conformant cluster the kubeconfig points at. What to create is decided by the
// pure plan (plan.ts); the constructor creates it, one small method per part.
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { Cluster } from "../cluster/component.ts";
import { Identity } from "../identity/component.ts";
import { ImageProfiles } from "../images/component.ts";
import { LayerRegistry, type LayerRegistryArgs } from "../layerRegistry/component.ts";
import { Network } from "../network/component.ts";
import type { RuntimeArgs } from "../runtime/args.ts";
import { Runtime } from "../runtime/component.ts";
import type { PlatformConfig } from "../shared/platformConfig.ts";
import { Tenancy } from "../tenancy/component.ts";
import type { SandboxPlatformArgs } from "./args.ts";
import { type EksPlan, type PlatformPlan, planPlatform } from "./plan.ts";

/** What the mode's part of the platform hands to the parts every mode has. */
interface ModeParts {
  provider: pulumi.ProviderResource;
  catalog: pulumi.Output<Record<string, string>>;
  runtimeExtra: Partial<RuntimeArgs>;
  layerAws?: LayerRegistryArgs["aws"];
  /** eks mode: the component's own outputs from the cluster and the identity */
  eksOutputs?: Pick<SandboxPlatform, "clusterName" | "kubeconfig" | "bucketName">;
  /** eks mode: EKS's OIDC issuer, the iss of the cluster's service-account tokens */
  oidcIssuer?: pulumi.Input<string>;
}

export class SandboxPlatform extends pulumi.ComponentResource {
  readonly mode: PlatformConfig["mode"];
  readonly catalog: pulumi.Output<Record<string, string>>;
  readonly managerUrl: string;
  readonly clusterName?: pulumi.Output<string>;
  readonly kubeconfig?: pulumi.Output<string>;
  readonly bucketName?: pulumi.Output<string>;
  /** the layer registry's bucket (eks mode with sbx:snapshots.layerRegistry) */
  readonly layerBucketName?: pulumi.Output<string>;

  constructor(name: string, args: SandboxPlatformArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:platform:SandboxPlatform", name, {}, opts);
    const plan = planPlatform(args.config, args);
    const parts = plan.eks ? this.eksParts(name, plan, plan.eks) : this.existingClusterParts(name, plan, args);
    this.catalog = parts.catalog;
    this.clusterName = parts.eksOutputs?.clusterName;
    this.kubeconfig = parts.eksOutputs?.kubeconfig;
    this.bucketName = parts.eksOutputs?.bucketName;
    const tenancy = new Tenancy(`${name}-tenancy`, { ...plan.tenancy, provider: parts.provider }, { parent: this });
    const runtime = new Runtime(
      `${name}-runtime`,
      {
        ...plan.runtime,
        ...parts.runtimeExtra,
        provider: parts.provider,
        catalog: this.catalog,
        ...clusterIssuer(args.config, parts.oidcIssuer),
      },
      { parent: this, dependsOn: [tenancy] },
    );
    if (plan.layerRegistry) {
      const layers = new LayerRegistry(
        `${name}-layer-registry`,
        {
          ...plan.layerRegistry,
          provider: parts.provider,
          nodeSelector: parts.runtimeExtra.nodeSelector,
          ...(parts.layerAws ? { aws: parts.layerAws } : {}),
        },
        { parent: this, dependsOn: [runtime.namespaceObject] },
      );
      this.layerBucketName = layers.bucketName;
    }
    this.mode = plan.mode;
    this.managerUrl = runtime.managerUrl;
    this.registerOutputs({
      mode: this.mode,
      catalog: this.catalog,
      managerUrl: this.managerUrl,
      clusterName: this.clusterName,
      bucketName: this.bucketName,
    });
  }

  /** existing-cluster mode: a provider for the kubeconfig; no AWS children. */
  private existingClusterParts(name: string, plan: PlatformPlan, args: SandboxPlatformArgs): ModeParts {
    const provider = new k8s.Provider(
      `${name}-k8s`,
      { kubeconfig: args.kubeconfig!, enableServerSideApply: true },
      { parent: this },
    );
    // no ECR here: pause/resume use the layer registry the platform runs, the registry the
    // stack names, or are off without either
    const snapshots = plan.inClusterSnapshots ?? plan.namedSnapshots;
    return {
      provider,
      catalog: pulumi.output(args.config.images.catalog),
      runtimeExtra: snapshots ? { snapshots } : {},
    };
  }

  /** eks mode: the network, images, identity and cluster, and what the runtime takes from them. */
  private eksParts(name: string, plan: PlatformPlan, eks: EksPlan): ModeParts {
    const parent = { parent: this };
    const network = new Network(`${name}-network`, { network: eks.network, clusterName: eks.clusterName }, parent);
    const images = new ImageProfiles(`${name}-images`, eks.images, parent);
    const identity = new Identity(
      `${name}-identity`,
      { ...eks.identity, snapshotRepositoryArn: images.snapshotRepositoryArn },
      parent,
    );
    const cluster = new Cluster(
      `${name}-cluster`,
      {
        ...eks.cluster,
        vpcId: network.vpcId,
        privateSubnetIds: network.privateSubnetIds,
        publicSubnetIds: network.publicSubnetIds,
        prePullImages: eks.prePullImages ? images.catalog.apply((c) => Object.values(c)) : undefined,
      },
      parent,
    );
    const ecr = images.snapshotRepositoryUrl
      ? { repositoryUrl: images.snapshotRepositoryUrl, retentionDays: eks.ecrSnapshotRetentionDays }
      : undefined;
    const snapshots = plan.inClusterSnapshots ?? ecr;
    return {
      provider: cluster.provider,
      catalog: images.catalog,
      runtimeExtra: {
        nodeSelector: eks.nodeSelector,
        podIdentity: { clusterName: cluster.clusterName, roleArn: identity.managerRoleArn },
        credentials: {
          baseRoleArn: identity.baseRoleArn,
          bucket: identity.bucketName,
          region: eks.region,
          durationSeconds: eks.credentialDurationSeconds,
        },
        ...(snapshots ? { snapshots } : {}),
      },
      oidcIssuer: cluster.oidcIssuer,
      layerAws: { prefix: eks.images.prefix, region: eks.region, clusterName: cluster.clusterName },
      eksOutputs: {
        clusterName: cluster.clusterName,
        kubeconfig: pulumi.secret(cluster.kubeconfig),
        bucketName: identity.bucketName,
      },
    };
  }
}

/**
 * The issuer of the cluster's service-account tokens, when sbx:auth.clusterIssuer asks for it:
 * EKS's OIDC issuer in eks mode, else the URL sbx:auth gives (keys read through the API server).
 */
function clusterIssuer(cfg: PlatformConfig, oidcIssuer?: pulumi.Input<string>): Pick<RuntimeArgs, "clusterIssuer"> {
  const ci = cfg.auth.clusterIssuer;
  const issuer = oidcIssuer ?? ci?.issuer;
  if (!ci || !issuer) return {};
  return { clusterIssuer: { name: ci.name, audiences: ci.audiences, issuer, viaApiServer: cfg.mode !== "eks" } };
}
