// The typed, validated stack config. Produced once by validatePlatformConfig; every other
// module reads this object, never raw config. In shared/ because the platform component and
// the components it composes (cluster, network, tenancy, runtime) all read it: kept under
// platform/ it made each of them a folder cycle with platform.
import type { TenancyInput } from "../../runtime/config/schema.ts";

export type PlatformMode = "eks" | "existing-cluster";

export interface NodeGroupConfig {
  name: string;
  instanceType: string;
  minSize: number;
  maxSize: number;
  /** initial size only: after creation the autoscaler (or an operator) owns it */
  desiredSize: number;
  diskSizeGiB: number;
  networkLimits?: InstanceNetworkLimits;
}

export interface SizeClassConfig {
  cpuRequest: string;
  cpuLimit: string;
  memoryRequest: string;
  memoryLimit: string;
  workspace: string;
  tmp: string;
  pids: number;
}

/** One allowed egress destination for sandboxes: an IP range or in-cluster pods. */
export type EgressRule =
  | { kind: "cidr"; cidr: string; ports: number[] }
  | { kind: "pods"; namespace: string; podLabels: Record<string, string>; ports: number[] };

/** sbx:snapshots.layerRegistry: a distribution registry the platform runs for paused sandboxes' layers. */
export interface LayerRegistryConfig {
  /** a distribution registry image, v2.8 or v3 */
  image: string;
  /** its registry binary inside the image; started as `<binary> serve <config>` */
  binary: string;
  /**
   * where the layers live: an S3 bucket the platform makes (eks mode, its default), a volume
   * claim (existing-cluster default), or an emptyDir that dies with the pod (trials only)
   */
  storage:
    | { kind: "s3" }
    | { kind: "volume"; size: string; storageClassName?: string }
    | { kind: "emptyDir"; sizeLimit: string };
  cpu: string;
  memory: string;
}

export type NetworkConfig =
  | { mode: "create"; cidr: string; azCount: number; natGateways: "single" | "perAz" }
  | { mode: "existing"; vpcId: string; cidr: string; privateSubnetIds: string[]; publicSubnetIds: string[] };

export interface PlatformConfig {
  name: string;
  mode: PlatformMode;
  cluster: {
    version: string;
    admins: string[];
    logTypes: string[];
    endpointPublicAccess: boolean;
    endpointPrivateAccess: boolean;
    publicAccessCidrs: string[];
  };
  network: NetworkConfig;
  vpcCni: { prefixDelegation: boolean; warmPrefixTarget: number; networkPolicy: boolean };
  nodeGroups: { system: NodeGroupConfig; sandbox: NodeGroupConfig[]; gpu?: NodeGroupConfig };
  prePullImages: boolean;
  images: { profiles: string[]; tag: string; catalog: Record<string, string> };
  /** repositoryUrl: an existing registry for paused sandboxes (existing-cluster mode only) */
  snapshots: {
    enabled: boolean;
    retentionDays: number;
    repositoryUrl?: string;
    /** sandbox pods move their own layers here, with a token each (components/runtime/args.ts) */
    podRegistry?: string;
    /** the token pair's certificate and the registry's names; the key is the secret sbx:registryTokenKey */
    registryToken?: RegistryTokenConfig;
    /** the platform deploys the registry in the runtime namespace (components/layerRegistry); with registryToken */
    layerRegistry?: LayerRegistryConfig;
  };
  outputs: { expirationDays: number };
  namespaces: { sandbox: string; runtime: string };
  sizeClasses: Record<string, SizeClassConfig>;
  budget: { cpu: string; memory: string; pods?: number };
  /** teams, their quotas and guarantees (sbx:tenancy, docs/tenancy.md); absent: one budget for all */
  tenancy?: TenancyInput;
  defaults: {
    profile: string;
    size: string;
    ttlSeconds: number;
    maxTtlSeconds: number;
    idleTimeoutSeconds: number;
    finishedGraceSeconds: number;
  };
  warmPool: { profile: string; size: string; count: number }[];
  egress: EgressRule[];
  /** ranges cut out of every egress CIDR besides the metadata endpoints (and, in eks mode, the VPC) */
  blockedCidrs: string[];
  runtime: {
    /** prebuilt runtime image; when unset the bundled runtime runs on `nodeImage` */
    image?: string;
    nodeImage: string;
    managerReplicas: number;
    controllerReplicas: number;
    cpu: string;
    memory: string;
    runtimeClassName?: string;
    /** sandbox pods in their own user namespace (`hostUsers: false`); default false */
    userNamespaces: boolean;
    credentialDurationSeconds: number;
  };
  /** identities besides the static tokens (sbx:auth, docs/identity.md) */
  auth: AuthSettings;
}

/** JWT issuers the runtime accepts (its config's auth.issuers), from sbx:auth. */
export interface AuthSettings {
  /** entries of the runtime's auth.issuers, as given (validated with the runtime's own schema) */
  issuers: Record<string, unknown>[];
  /**
   * The cluster's own service-account issuer, so in-cluster agents call sbx with their projected
   * token: EKS's OIDC issuer in eks mode (the URL comes from the cluster), the API server's
   * discovery (its iss given here) in existing-cluster mode. Unset: off.
   */
  clusterIssuer?: {
    name: string;
    audiences: string[];
    /** the iss of the cluster's service-account tokens; eks mode reads it from the cluster */
    issuer?: string;
  };
}

/** An EC2 instance type's network limits (cluster/maxPods.ts turns them into max pods). */
export interface InstanceNetworkLimits {
  vcpus: number;
  maxEnis: number;
  ipsPerEni: number;
}

/** How the runtime signs registry tokens (runtime snapshots.tokenAuth), minus the private key. */
export interface RegistryTokenConfig {
  /** PEM: the registry's auth.token.rootcertbundle, and the x5c of every token */
  certificate: string;
  /** the registry's auth.token.issuer */
  issuer: string;
  /** the registry's auth.token.service */
  service: string;
  ttlSeconds: number;
}
