// Arguments of the Runtime component (`sbx:runtime:Runtime`).
import type * as pulumi from "@pulumi/pulumi";
import type { TenancyInput } from "../../runtime/config/schema.ts";
import type { RegistryTokenConfig, SizeClassConfig } from "../shared/platformConfig.ts";
import type { RuntimeBundle } from "./bundle.ts";

/** How the runtime's code reaches the pods. */
export type RuntimeDelivery =
  /** the esbuild bundle in a ConfigMap, run by a public Node image (no image build needed) */
  | { kind: "bundle"; bundle: RuntimeBundle; nodeImage: string }
  /** a prebuilt image whose entrypoint is the runtime (`sbx:runtime.image`) */
  | { kind: "image"; image: string };

/** Values that end up in the runtime's config.json; Outputs where they come from AWS. */
export interface RuntimeSettings {
  sizeClasses: Record<string, SizeClassConfig>;
  /** admission budget; the same numbers as the namespace ResourceQuota requests */
  budget: { cpu: string; memory: string };
  defaults: {
    profile: string;
    size: string;
    ttlSeconds: number;
    maxTtlSeconds: number;
    idleTimeoutSeconds: number;
    finishedGraceSeconds: number;
  };
  warmPool: { profile: string; size: string; count: number }[];
  /** RuntimeClass for sandbox pods (e.g. gVisor). Default: none. */
  runtimeClassName?: string;
  /** Sandbox pods in their own user namespace (`hostUsers: false`). Default: false. */
  userNamespaces?: boolean;
  /** JWT issuers (entries of the runtime's auth.issuers, from sbx:auth.issuers). Default: none. */
  authIssuers?: Record<string, unknown>[];
  /** Teams and their quotas (the runtime's `tenancy` section, docs/tenancy.md). Default: none. */
  tenancy?: TenancyInput;
}

/**
 * The cluster's service-account issuer as an accepted issuer, so an agent pod calls sbx with its
 * projected token. `issuer` is the iss of the cluster's tokens (EKS: its OIDC issuer URL).
 */
export interface ClusterIssuerArgs {
  name: string;
  audiences: string[];
  issuer: pulumi.Input<string>;
  /**
   * true: the keys come from the API server's own discovery (https://kubernetes.default.svc),
   * fetched with the pod's CA and service-account token (existing clusters, whose issuer may not
   * be public); false: from the issuer itself (EKS's is public)
   */
  viaApiServer: boolean;
}

export interface RuntimeArgs {
  /** Kubernetes provider of the target cluster. Required. */
  provider: pulumi.ProviderResource;
  /** Namespace the manager and controller run in; created here. Default in config: "sbx-system". */
  namespace: string;
  /** The sandbox namespace (Tenancy creates it); the runtime's Roles live there. */
  sandboxNamespace: string;
  delivery: RuntimeDelivery;
  /** Manager replicas (stateless HTTP API). Default in config: 2. */
  managerReplicas: number;
  /** Controller replicas; one leads via the Lease, the rest stand by. Default in config: 2. */
  controllerReplicas: number;
  /** CPU request and memory request/limit per runtime container. Defaults: "500m", "512Mi". */
  resources: { cpu: string; memory: string };
  settings: RuntimeSettings;
  /** profile -> image reference for the image catalog ConfigMap. */
  catalog: pulumi.Input<Record<string, pulumi.Input<string>>>;
  /** owner -> plaintext API token (a secret). Only sha256 hashes reach the cluster. Default: {}. */
  apiTokens?: pulumi.Input<Record<string, string>>;
  /** Per-sandbox S3 credentials; unset in existing-cluster mode. */
  credentials?: {
    baseRoleArn: pulumi.Input<string>;
    bucket: pulumi.Input<string>;
    region: pulumi.Input<string>;
    durationSeconds: number;
  };
  /** Snapshot registry; unset when snapshots are disabled. */
  snapshots?: { repositoryUrl: pulumi.Input<string>; retentionDays: number } & PodLayersSettings;
  /** EKS Pod Identity for the manager's and controller's service accounts; unset outside EKS. */
  podIdentity?: { clusterName: pulumi.Input<string>; roleArn: pulumi.Input<string> };
  /** nodeSelector for runtime pods (the system node group in eks mode). Default: none. */
  nodeSelector?: Record<string, string>;
  /** The cluster's service-account issuer, accepted besides settings.authIssuers. Default: off. */
  clusterIssuer?: ClusterIssuerArgs;
}

/**
 * Sandbox pods moving their own snapshot layers (runtime snapshots.podRegistry), with a token
 * per sandbox the runtime signs (snapshots.tokenAuth). The registry is a distribution registry
 * in `auth: token` mode that trusts the pair's certificate (`sbx registry-token-key` makes the
 * pair). The component keeps the pair in a Secret of its own, mounted into both roles. Both or
 * neither.
 */
export interface PodLayersSettings {
  /** the registry as sandbox pods reach it, http://host:port */
  podRegistry?: string;
  /** the registry is the platform's own in the runtime namespace (components/layerRegistry), reached at its pods */
  inCluster?: boolean;
  registryToken?: RegistryTokenConfig & {
    /** PEM private key of `certificate` (secret); checked against it before anything deploys */
    key: pulumi.Input<string>;
  };
}
