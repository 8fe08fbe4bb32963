// sbx:platform:SandboxPlatform — composes the platform. `eks` mode: Network, ImageProfiles,
// Identity, Cluster, Tenancy, Runtime. `existing-cluster` mode: Tenancy and Runtime only,
// on whatever conformant cluster the kubeconfig points at.
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { ValidationError } from "../../runtime/core/errors.ts";
import { Cluster } from "../cluster/component.ts";
import { SYSTEM_NODE_SELECTOR } from "../cluster/plan.ts";
import { Identity } from "../identity/component.ts";
import { LayerRegistry, type LayerRegistryArgs } from "../layerRegistry/component.ts";
import { LAYER_REGISTRY, layerRegistryUrl } from "../shared/k8s.ts";
import { ImageProfiles } from "../images/component.ts";
import { Network } from "../network/component.ts";
import type { RuntimeArgs } from "../runtime/args.ts";
import { Runtime } from "../runtime/component.ts";
import { Tenancy } from "../tenancy/component.ts";
import type { SandboxPlatformArgs } from "./args.ts";
import type { PlatformConfig } from "../shared/platformConfig.ts";

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
    const cfg = args.config;
    const parent = { parent: this };
    // the layer registry the platform runs (components/layerRegistry), in either mode
    const inCluster: RuntimeArgs["snapshots"] =
      cfg.snapshots.enabled && cfg.snapshots.layerRegistry && cfg.snapshots.registryToken
        ? {
            repositoryUrl: `${layerRegistryUrl(cfg.namespaces.runtime)}/${LAYER_REGISTRY.repository}`,
            retentionDays: cfg.snapshots.retentionDays,
            inCluster: true,
            registryToken: { ...cfg.snapshots.registryToken, key: requireTokenKey(args) },
          }
        : undefined;
    let layerAws: LayerRegistryArgs["aws"];
    const common = runtimeCommon(cfg, args);
    let provider: pulumi.ProviderResource;
    let runtimeExtra: Partial<RuntimeArgs> = {};
    let blockedCidrs: string[] = [...cfg.blockedCidrs];
    /** the iss of the cluster's service-account tokens: EKS's OIDC issuer, or as sbx:auth gives it */
    let clusterIssuerUrl: pulumi.Input<string> | undefined = cfg.auth.clusterIssuer?.issuer;

    if (cfg.mode === "existing-cluster") {
      if (!args.kubeconfig)
        throw new ValidationError("sbx:kubeconfig", undefined, "existing-cluster mode needs a kubeconfig");
      provider = new k8s.Provider(`${name}-k8s`, { kubeconfig: args.kubeconfig, enableServerSideApply: true }, parent);
      this.catalog = pulumi.output(cfg.images.catalog);
      // no ECR here: pause/resume use the layer registry the platform runs, the registry the
      // stack names, or are off without either
      if (inCluster) runtimeExtra = { snapshots: inCluster };
      else if (cfg.snapshots.enabled && cfg.snapshots.repositoryUrl)
        runtimeExtra = {
          snapshots: {
            repositoryUrl: cfg.snapshots.repositoryUrl,
            retentionDays: cfg.snapshots.retentionDays,
            ...(cfg.snapshots.podRegistry && cfg.snapshots.registryToken
              ? {
                  podRegistry: cfg.snapshots.podRegistry,
                  registryToken: { ...cfg.snapshots.registryToken, key: requireTokenKey(args) },
                }
              : {}),
          },
        };
    } else {
      if (!args.region)
        throw new ValidationError(
          "aws:region",
          undefined,
          "eks mode needs the AWS region: `pulumi config set aws:region us-east-1`",
        );
      const clusterName = `${cfg.name}`;
      const network = new Network(`${name}-network`, { network: cfg.network, clusterName }, parent);
      const images = new ImageProfiles(
        `${name}-images`,
        {
          prefix: cfg.name,
          profiles: cfg.images.profiles,
          tag: cfg.images.tag,
          catalogOverrides: cfg.images.catalog,
          // with the layer registry, snapshots live in its bucket: no ECR repository for them
          snapshots: { ...cfg.snapshots, enabled: cfg.snapshots.enabled && !inCluster },
        },
        parent,
      );
      const identity = new Identity(
        `${name}-identity`,
        {
          prefix: cfg.name,
          outputsExpirationDays: cfg.outputs.expirationDays,
          snapshotRepositoryArn: images.snapshotRepositoryArn,
        },
        parent,
      );
      const cluster = new Cluster(
        `${name}-cluster`,
        {
          clusterName,
          cluster: cfg.cluster,
          vpcCni: cfg.vpcCni,
          nodeGroups: cfg.nodeGroups,
          vpcId: network.vpcId,
          privateSubnetIds: network.privateSubnetIds,
          publicSubnetIds: network.publicSubnetIds,
          prePullImages: cfg.prePullImages ? images.catalog.apply((c) => Object.values(c)) : undefined,
        },
        parent,
      );
      provider = cluster.provider;
      clusterIssuerUrl = cluster.oidcIssuer;
      blockedCidrs = [network.vpcCidr, ...cfg.blockedCidrs];
      this.catalog = images.catalog;
      this.clusterName = cluster.clusterName;
      this.kubeconfig = pulumi.secret(cluster.kubeconfig);
      this.bucketName = identity.bucketName;
      runtimeExtra = {
        nodeSelector: { ...SYSTEM_NODE_SELECTOR },
        podIdentity: { clusterName: cluster.clusterName, roleArn: identity.managerRoleArn },
        credentials: {
          baseRoleArn: identity.baseRoleArn,
          bucket: identity.bucketName,
          region: args.region,
          durationSeconds: cfg.runtime.credentialDurationSeconds,
        },
        ...(inCluster
          ? { snapshots: inCluster }
          : images.snapshotRepositoryUrl
            ? { snapshots: { repositoryUrl: images.snapshotRepositoryUrl, retentionDays: cfg.snapshots.retentionDays } }
            : {}),
      };
      layerAws = { prefix: cfg.name, region: args.region, clusterName: cluster.clusterName };
    }

    const tenancy = new Tenancy(
      `${name}-tenancy`,
      {
        provider,
        namespace: cfg.namespaces.sandbox,
        sizeClasses: cfg.sizeClasses,
        defaultSize: cfg.defaults.size,
        budget: cfg.budget,
        egress: cfg.egress,
        blockedCidrs,
      },
      parent,
    );
    const ci = cfg.auth.clusterIssuer;
    const clusterIssuer: RuntimeArgs["clusterIssuer"] =
      ci && clusterIssuerUrl
        ? { name: ci.name, audiences: ci.audiences, issuer: clusterIssuerUrl, viaApiServer: cfg.mode !== "eks" }
        : undefined;
    const runtime = new Runtime(
      `${name}-runtime`,
      { ...common, ...runtimeExtra, provider, catalog: this.catalog, ...(clusterIssuer ? { clusterIssuer } : {}) },
      { parent: this, dependsOn: [tenancy] },
    );
    if (inCluster?.registryToken && cfg.snapshots.layerRegistry) {
      const layers = new LayerRegistry(
        `${name}-layer-registry`,
        {
          provider,
          namespace: cfg.namespaces.runtime,
          sandboxNamespace: cfg.namespaces.sandbox,
          config: cfg.snapshots.layerRegistry,
          token: inCluster.registryToken,
          nodeSelector: runtimeExtra.nodeSelector,
          ...(layerAws ? { aws: layerAws } : {}),
        },
        { parent: this, dependsOn: [runtime.namespaceObject] },
      );
      this.layerBucketName = layers.bucketName;
    }
    this.mode = cfg.mode;
    this.managerUrl = runtime.managerUrl;
    this.registerOutputs({
      mode: this.mode,
      catalog: this.catalog,
      managerUrl: this.managerUrl,
      clusterName: this.clusterName,
      bucketName: this.bucketName,
    });
  }
}

function runtimeCommon(cfg: PlatformConfig, args: SandboxPlatformArgs): Omit<RuntimeArgs, "provider" | "catalog"> {
  return {
    namespace: cfg.namespaces.runtime,
    sandboxNamespace: cfg.namespaces.sandbox,
    delivery: args.delivery,
    managerReplicas: cfg.runtime.managerReplicas,
    controllerReplicas: cfg.runtime.controllerReplicas,
    resources: { cpu: cfg.runtime.cpu, memory: cfg.runtime.memory },
    settings: {
      ...(cfg.auth.issuers.length > 0 ? { authIssuers: cfg.auth.issuers } : {}),
      sizeClasses: cfg.sizeClasses,
      budget: { cpu: cfg.budget.cpu, memory: cfg.budget.memory },
      defaults: { ...cfg.defaults },
      warmPool: cfg.warmPool.map((p) => ({ ...p })),
      ...(cfg.runtime.runtimeClassName ? { runtimeClassName: cfg.runtime.runtimeClassName } : {}),
      ...(cfg.runtime.userNamespaces ? { userNamespaces: true } : {}),
      ...(cfg.tenancy ? { tenancy: cfg.tenancy } : {}),
    },
    apiTokens: args.apiTokens,
  };
}

function requireTokenKey(args: SandboxPlatformArgs): pulumi.Input<string> {
  if (!args.registryTokenKey)
    throw new ValidationError(
      "sbx:registryTokenKey",
      undefined,
      "snapshots.registryToken needs its private key: `pulumi config set --secret sbx:registryTokenKey < key.pem`",
    );
  return args.registryTokenKey;
}
