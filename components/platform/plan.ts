// What the SandboxPlatform component creates, decided from the validated stack config alone:
// the mode's children and every argument that does not come from another child's outputs.
// Pure: the component (component.ts) creates resources from this plan and fills in the few
// values only a created child knows (the cluster's provider, the image repository's URL, the
// identity's role ARNs). Every refusal is thrown here, before the first resource exists.
import { ValidationError } from "../../runtime/core/errors.ts";
import { SYSTEM_NODE_SELECTOR } from "../cluster/plan.ts";
import type { ImageProfilesArgs } from "../images/args.ts";
import type { RuntimeArgs } from "../runtime/args.ts";
import { LAYER_REGISTRY, layerRegistryUrl } from "../shared/k8s.ts";
import type { LayerRegistryConfig, PlatformConfig } from "../shared/platformConfig.ts";
import type { TenancyPlanInput } from "../tenancy/args.ts";
import type { SandboxPlatformArgs } from "./args.ts";

type RuntimeSnapshots = NonNullable<RuntimeArgs["snapshots"]>;

/** What eks mode adds: the AWS children, and the runtime's settings that do not depend on them. */
export interface EksPlan {
  clusterName: string;
  region: string;
  network: PlatformConfig["network"];
  images: ImageProfilesArgs;
  identity: { prefix: string; outputsExpirationDays: number };
  /** the cluster's args apart from the network's outputs and the images to pre-pull */
  cluster: {
    clusterName: string;
    cluster: PlatformConfig["cluster"];
    vpcCni: PlatformConfig["vpcCni"];
    nodeGroups: PlatformConfig["nodeGroups"];
  };
  prePullImages: boolean;
  nodeSelector: Record<string, string>;
  credentialDurationSeconds: number;
  /** ECR snapshots (when snapshots are on without the layer registry): their retention */
  ecrSnapshotRetentionDays: number;
}

export interface PlatformPlan {
  mode: PlatformConfig["mode"];
  /** the runtime's args common to both modes */
  runtime: Omit<RuntimeArgs, "provider" | "catalog">;
  /** the layer registry the platform runs, as the runtime reaches it; undefined when it runs none */
  inClusterSnapshots?: RuntimeSnapshots;
  /** existing-cluster mode: the snapshot registry the stack names (no ECR there) */
  namedSnapshots?: RuntimeSnapshots;
  /** eks mode only */
  eks?: EksPlan;
  tenancy: TenancyPlanInput;
  /** the layer registry component's args apart from the provider and AWS outputs; undefined: none */
  layerRegistry?: {
    namespace: string;
    sandboxNamespace: string;
    config: LayerRegistryConfig;
    token: NonNullable<RuntimeSnapshots["registryToken"]>;
  };
}

/** The plan, or a ValidationError naming the missing input (kubeconfig, region, registry token key). */
export function planPlatform(cfg: PlatformConfig, args: Omit<SandboxPlatformArgs, "config">): PlatformPlan {
  // first, as before the plan existed: a missing registry token key is named ahead of the mode's inputs
  const inCluster = planInClusterSnapshots(cfg, args);
  if (cfg.mode === "existing-cluster" && !args.kubeconfig)
    throw new ValidationError("sbx:kubeconfig", undefined, "existing-cluster mode needs a kubeconfig");
  if (cfg.mode === "eks" && !args.region)
    throw new ValidationError(
      "aws:region",
      undefined,
      "eks mode needs the AWS region: `pulumi config set aws:region us-east-1`",
    );
  const layers = cfg.snapshots.layerRegistry;
  return {
    mode: cfg.mode,
    runtime: planRuntimeCommon(cfg, args),
    ...(inCluster ? { inClusterSnapshots: inCluster } : {}),
    ...(cfg.mode === "existing-cluster" && !inCluster ? planNamedSnapshots(cfg, args) : {}),
    ...(cfg.mode === "eks" ? { eks: planEks(cfg, args.region!, inCluster !== undefined) } : {}),
    tenancy: {
      namespace: cfg.namespaces.sandbox,
      sizeClasses: cfg.sizeClasses,
      defaultSize: cfg.defaults.size,
      budget: cfg.budget,
      egress: cfg.egress,
      // in eks mode the VPC's own range is blocked too (Network's CIDR is the configured one)
      blockedCidrs: cfg.mode === "eks" ? [cfg.network.cidr, ...cfg.blockedCidrs] : [...cfg.blockedCidrs],
    },
    ...(inCluster?.registryToken && layers
      ? {
          layerRegistry: {
            namespace: cfg.namespaces.runtime,
            sandboxNamespace: cfg.namespaces.sandbox,
            config: layers,
            token: inCluster.registryToken,
          },
        }
      : {}),
  };
}

/** The layer registry the platform runs (components/layerRegistry), in either mode. */
function planInClusterSnapshots(
  cfg: PlatformConfig,
  args: Omit<SandboxPlatformArgs, "config">,
): RuntimeSnapshots | undefined {
  const s = cfg.snapshots;
  if (!(s.enabled && s.layerRegistry && s.registryToken)) return undefined;
  return {
    repositoryUrl: `${layerRegistryUrl(cfg.namespaces.runtime)}/${LAYER_REGISTRY.repository}`,
    retentionDays: s.retentionDays,
    inCluster: true,
    registryToken: { ...s.registryToken, key: requireTokenKey(args) },
  };
}

/** existing-cluster mode without the layer registry: the registry the stack names, or none. */
function planNamedSnapshots(
  cfg: PlatformConfig,
  args: Omit<SandboxPlatformArgs, "config">,
): Pick<PlatformPlan, "namedSnapshots"> {
  const s = cfg.snapshots;
  if (!(s.enabled && s.repositoryUrl)) return {};
  const podLayers =
    s.podRegistry && s.registryToken
      ? { podRegistry: s.podRegistry, registryToken: { ...s.registryToken, key: requireTokenKey(args) } }
      : {};
  return { namedSnapshots: { repositoryUrl: s.repositoryUrl, retentionDays: s.retentionDays, ...podLayers } };
}

function planEks(cfg: PlatformConfig, region: string, inCluster: boolean): EksPlan {
  const clusterName = `${cfg.name}`;
  return {
    clusterName,
    region,
    network: cfg.network,
    images: {
      prefix: cfg.name,
      profiles: cfg.images.profiles,
      tag: cfg.images.tag,
      catalogOverrides: cfg.images.catalog,
      // with the layer registry, snapshots live in its bucket: no ECR repository for them
      snapshots: { ...cfg.snapshots, enabled: cfg.snapshots.enabled && !inCluster },
    },
    identity: { prefix: cfg.name, outputsExpirationDays: cfg.outputs.expirationDays },
    cluster: { clusterName, cluster: cfg.cluster, vpcCni: cfg.vpcCni, nodeGroups: cfg.nodeGroups },
    prePullImages: cfg.prePullImages,
    nodeSelector: { ...SYSTEM_NODE_SELECTOR },
    credentialDurationSeconds: cfg.runtime.credentialDurationSeconds,
    ecrSnapshotRetentionDays: cfg.snapshots.retentionDays,
  };
}

function planRuntimeCommon(
  cfg: PlatformConfig,
  args: Omit<SandboxPlatformArgs, "config">,
): Omit<RuntimeArgs, "provider" | "catalog"> {
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

function requireTokenKey(
  args: Omit<SandboxPlatformArgs, "config">,
): NonNullable<SandboxPlatformArgs["registryTokenKey"]> {
  if (!args.registryTokenKey)
    throw new ValidationError(
      "sbx:registryTokenKey",
      undefined,
      "snapshots.registryToken needs its private key: `pulumi config set --secret sbx:registryTokenKey < key.pem`",
    );
  return args.registryTokenKey;
}
