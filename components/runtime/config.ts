// The runtime's config.json and tokens.json, built from plain values. Pure. The component
// resolves AWS Outputs first, then calls these; the result always passes the runtime's
// own validateRuntimeConfig, so a config the runtime would reject fails at preview.
import { createHash, createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { type RuntimeConfigInput, validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { ValidationError } from "../../runtime/core/errors.ts";
import type { RegistryTokenConfig } from "../shared/platformConfig.ts";
import type { ClusterIssuerArgs, RuntimeSettings } from "./args.ts";

export const PATHS = {
  configDir: "/etc/sbx/config",
  config: "/etc/sbx/config/config.json",
  catalogDir: "/etc/sbx/catalog",
  catalog: "/etc/sbx/catalog/catalog.json",
  tokensDir: "/etc/sbx/tokens",
  tokens: "/etc/sbx/tokens/tokens.json",
  registryTokenDir: "/etc/sbx/registry-token",
} as const;
export const HTTP_PORT = 8080;
export const LEASE_NAME = "sbx-controller";

export interface RuntimeConfigValues {
  settings: RuntimeSettings;
  namespace: string;
  sandboxNamespace: string;
  catalog: Record<string, string>;
  credentials?: { baseRoleArn: string; bucket: string; region: string; durationSeconds: number };
  /** the token pair's private key never comes here: config.json names only its file */
  snapshots?: {
    repositoryUrl: string;
    retentionDays: number;
    podRegistry?: string;
    /** the registry is the platform's in-cluster one (components/layerRegistry): pods move their layers there */
    inCluster?: boolean;
    registryToken?: RegistryTokenConfig;
  };
  /** the cluster's service-account issuer, its URL resolved */
  clusterIssuer?: Omit<ClusterIssuerArgs, "issuer"> & { issuer: string };
}

/** Where a pod finds its service account's CA and token (Kubernetes' fixed mount). */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * The runtime's auth.issuers entry for the cluster's service-account issuer: owner = the token's
 * sub (system:serviceaccount:<ns>:<name>), team = its namespace.
 */
export function clusterIssuerEntry(c: Omit<ClusterIssuerArgs, "issuer"> & { issuer: string }): Record<string, unknown> {
  return {
    name: c.name,
    issuer: c.issuer,
    audiences: [...c.audiences],
    owner: { claim: "sub", prefix: "" },
    team: { claim: ["kubernetes.io", "namespace"], stripPrefix: "" },
    ...(c.viaApiServer
      ? {
          // the keys straight from the API server by its in-cluster name: its discovery document
          // names a jwks_uri at its own address, where the bearer token would not be sent
          jwksUrl: "https://kubernetes.default.svc/openid/v1/jwks",
          caFile: `${SERVICE_ACCOUNT_DIR}/ca.crt`,
          tokenFile: `${SERVICE_ACCOUNT_DIR}/token`,
        }
      : {}),
  };
}

// Over 60 lines on purpose: the runtime's config.json as one literal, field for field as validateRuntimeConfig reads
// it.
export function buildRuntimeConfig(v: RuntimeConfigValues): RuntimeConfigInput {
  const s = v.settings;
  const cfg: RuntimeConfigInput = {
    platform: "kubernetes",
    listen: { host: "0.0.0.0", port: HTTP_PORT },
    sizeClasses: structuredClone(s.sizeClasses),
    budget: { ...s.budget },
    defaults: { ...s.defaults },
    warmPool: s.warmPool.map((p) => ({ ...p })),
    catalog: { ...v.catalog },
    catalogPath: PATHS.catalog,
    tokensPath: PATHS.tokens,
    kubernetes: {
      namespace: v.sandboxNamespace,
      runtimeNamespace: v.namespace,
      leaseName: LEASE_NAME,
      // the manager Deployment runs several replicas: they share one admission budget (runtime/k8s/budget)
      budgetShares: { enabled: true },
      ...(s.runtimeClassName ? { runtimeClassName: s.runtimeClassName } : {}),
      ...(s.userNamespaces ? { userNamespaces: true } : {}),
    },
  };
  const issuers = [
    ...(s.authIssuers ?? []).map((i) => structuredClone(i)),
    ...(v.clusterIssuer ? [clusterIssuerEntry(v.clusterIssuer)] : []),
  ];
  if (issuers.length > 0) cfg.auth = { issuers: issuers as NonNullable<RuntimeConfigInput["auth"]>["issuers"] };
  if (s.tenancy) cfg.tenancy = structuredClone(s.tenancy);
  if (v.credentials) cfg.credentials = { ...v.credentials };
  if (v.snapshots) {
    // the registry part may carry a scheme (http:// for a plain-HTTP registry): split after it
    const scheme = v.snapshots.repositoryUrl.match(/^https?:\/\//)?.[0].length ?? 0;
    const slash = v.snapshots.repositoryUrl.indexOf("/", scheme);
    if (slash <= scheme)
      throw new ValidationError(
        "snapshots.repositoryUrl",
        v.snapshots.repositoryUrl,
        "expected <registry>/<repository>",
      );
    const { podRegistry, inCluster, registryToken } = v.snapshots;
    // pods moving their layers always get a token each here: no one-tenant mode from Pulumi
    if (!(podRegistry || inCluster) !== !registryToken)
      throw new ValidationError(
        registryToken ? "snapshots.podRegistry" : "snapshots.registryToken",
        podRegistry ?? "(unset)",
        "set podRegistry (or the in-cluster layer registry) and registryToken together: pods move their own layers only with a token each",
      );
    cfg.snapshots = {
      registry: v.snapshots.repositoryUrl.slice(0, slash),
      repository: v.snapshots.repositoryUrl.slice(slash + 1),
      retentionDays: v.snapshots.retentionDays,
      ...(podRegistry || inCluster
        ? {
            ...(inCluster ? { inCluster: true } : { podRegistry }),
            tokenAuth: {
              keyFile: `${PATHS.registryTokenDir}/key.pem`,
              certFile: `${PATHS.registryTokenDir}/cert.pem`,
              issuer: registryToken!.issuer,
              service: registryToken!.service,
              ttlSeconds: registryToken!.ttlSeconds,
            },
          }
        : {}),
    };
  }
  validateRuntimeConfig(cfg);
  return cfg;
}

/** owner -> token becomes sha256(token) hex -> owner: the runtime's tokensPath format. */
export function hashTokens(tokens: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [owner, token] of Object.entries(tokens)) {
    if (typeof token !== "string" || token.length < 16) {
      throw new ValidationError(
        `sbx:apiTokens.${owner}`,
        "(secret)",
        "use a random token of at least 16 characters, e.g. `openssl rand -hex 32`",
      );
    }
    const hash = createHash("sha256").update(token).digest("hex");
    if (out[hash])
      throw new ValidationError(
        `sbx:apiTokens.${owner}`,
        "(secret)",
        `same token as owner ${out[hash]}; give every owner its own token`,
      );
    out[hash] = owner;
  }
  return out;
}

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/**
 * The secret sbx:registryTokenKey, checked against the certificate before any object deploys
 * (synchronously: an error thrown inside an Output's apply leaves an inline Automation API
 * program hanging): a wrong key would otherwise leave both Deployments crash-looping at start.
 */
export function checkTokenKey(keyPem: string, certPem: string): string {
  const field = "sbx:registryTokenKey";
  let key: KeyObject;
  try {
    key = createPrivateKey(keyPem);
  } catch (err) {
    throw new ValidationError(field, "(secret)", `is not a PEM private key (${(err as Error).message})`);
  }
  if (!new X509Certificate(certPem).checkPrivateKey(key))
    throw new ValidationError(
      field,
      "(secret)",
      "is not the key of sbx:snapshots.registryToken.certificate; give the key.pem made with that cert.pem",
    );
  return keyPem;
}
