// Stack config schema: raw `sbx:*` values in, one typed PlatformConfig out. Pure: infra/config.ts
// reads the values with pulumi.Config and hands them here. Every error names the key
// (`sbx:<path>`), the bad value and the fix, and is thrown before any resource exists.
// Over 400 lines on purpose: it is the one place that knows every stack key (docs/stack-config.md
// mirrors it); splitting it by section would scatter the unknown-key check across files.
// Over 400 lines for now: one reader per stack-config section; auth and tenancy moved out to
// authConfig.ts and teams.ts, and the size classes and snapshots sections are next to split.
import { X509Certificate } from "node:crypto";
import { resolveInstanceLimits } from "../components/cluster/maxPods.ts";
import { cidrContains, parseCidr } from "../components/shared/cidr.ts";
import { LAYER_REGISTRY, LAYER_REGISTRY_LABELS } from "../components/shared/k8s.ts";
import type {
  EgressRule,
  LayerRegistryConfig,
  NetworkConfig,
  NodeGroupConfig,
  PlatformConfig,
  SizeClassConfig,
} from "../components/shared/platformConfig.ts";
import { DEFAULT_SIZE_CLASSES, TOKEN_AUTH_DEFAULTS, TOKEN_NAME_RE } from "../runtime/config/schema.ts";
import { ValidationError } from "../runtime/core/errors.ts";
import { parseCpu, parseMemory } from "../runtime/core/quantity.ts";
import { readAuth } from "./authConfig.ts";
import { bool, int, isPlainObject, list, obj, oneOf, optStr, quantity, type Raw, str, strList } from "./readers.ts";
import { readTenancy } from "./teams.ts";

/** Every top-level key under the `sbx` config namespace. Secrets are read as secrets. */
export const CONFIG_KEYS = [
  "name",
  "mode",
  "cluster",
  "network",
  "vpcCni",
  "nodeGroups",
  "prePullImages",
  "images",
  "snapshots",
  "outputs",
  "namespaces",
  "sizeClasses",
  "budget",
  "defaults",
  "warmPool",
  "egress",
  "blockedCidrs",
  "runtime",
  "auth",
  "tenancy",
] as const;
export const SECRET_CONFIG_KEYS = ["kubeconfig", "apiTokens", "registryTokenKey"] as const;

const DNS_LABEL = {
  re: /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/,
  fix: "use a DNS label: lowercase letters, digits and '-', at most 63 characters",
};
const NAME = {
  re: /^[a-z][a-z0-9-]{1,30}[a-z0-9]$/,
  fix: "use 3-32 lowercase letters, digits and '-', starting with a letter",
};
const K8S_VERSION = { re: /^1\.\d{2}$/, fix: 'pin a minor version such as "1.33"' };
const IAM_PRINCIPAL = {
  re: /^arn:aws[a-z-]*:iam::\d{12}:(role|user)\/[\w+=,.@/-]+$/,
  fix: "use an IAM role or user ARN such as arn:aws:iam::123456789012:role/Admin",
};
const LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"] as const;
const K = (path: string) => `sbx:${path}`;

export function validatePlatformConfig(raw: Raw): PlatformConfig {
  for (const key of Object.keys(raw)) {
    if (!(CONFIG_KEYS as readonly string[]).includes(key) && !(SECRET_CONFIG_KEYS as readonly string[]).includes(key)) {
      throw new ValidationError(
        K(key),
        raw[key],
        `unknown key; use one of: ${[...CONFIG_KEYS, ...SECRET_CONFIG_KEYS].join(", ")}`,
      );
    }
  }
  const mode = oneOf(K("mode"), raw.mode, ["eks", "existing-cluster"] as const, "eks");
  const namespaces = readNamespaces(raw.namespaces);
  const sizeClasses = readSizeClasses(raw.sizeClasses);
  const images = readImages(raw.images, mode);
  const snapshots = readSnapshots(raw.snapshots, mode, raw.registryTokenKey !== undefined);
  const cfg: PlatformConfig = {
    name: str(K("name"), raw.name, "sbx", NAME),
    mode,
    cluster: readCluster(raw.cluster),
    network: readNetwork(raw.network),
    vpcCni: readVpcCni(raw.vpcCni),
    nodeGroups: readNodeGroups(raw.nodeGroups),
    prePullImages: bool(K("prePullImages"), raw.prePullImages, true),
    images,
    snapshots,
    outputs: readOutputs(raw.outputs),
    namespaces,
    sizeClasses,
    budget: readBudget(raw.budget),
    defaults: readDefaults(raw.defaults, sizeClasses, images.profiles),
    warmPool: readWarmPool(raw.warmPool, sizeClasses, images.profiles),
    egress: [...readEgress(raw.egress, namespaces.sandbox), ...registryEgress(snapshots, namespaces.runtime)],
    blockedCidrs: readBlockedCidrs(raw.blockedCidrs),
    runtime: readRuntime(raw.runtime),
    auth: readAuth(raw.auth, mode),
  };
  const tenancy = readTenancy(raw.tenancy, cfg.budget);
  if (tenancy) cfg.tenancy = tenancy;
  if (mode === "existing-cluster" && !raw.kubeconfig) {
    throw new ValidationError(
      K("kubeconfig"),
      raw.kubeconfig,
      'existing-cluster mode needs the cluster\'s kubeconfig: `pulumi config set --secret sbx:kubeconfig "$(cat ~/.kube/config)"`',
    );
  }
  return cfg;
}

function readCluster(v: unknown): PlatformConfig["cluster"] {
  const o = obj(K("cluster"), v, [
    "version",
    "admins",
    "logTypes",
    "endpointPublicAccess",
    "endpointPrivateAccess",
    "publicAccessCidrs",
  ]);
  const logTypes = strList(K("cluster.logTypes"), o.logTypes, ["api", "audit", "authenticator"]);
  for (const [i, t] of logTypes.entries()) oneOf(K(`cluster.logTypes[${i}]`), t, LOG_TYPES, "api");
  const publicAccessCidrs = strList(K("cluster.publicAccessCidrs"), o.publicAccessCidrs, ["0.0.0.0/0"]);
  for (const [i, c] of publicAccessCidrs.entries()) parseCidr(K(`cluster.publicAccessCidrs[${i}]`), c);
  const endpointPublicAccess = bool(K("cluster.endpointPublicAccess"), o.endpointPublicAccess, true);
  const endpointPrivateAccess = bool(K("cluster.endpointPrivateAccess"), o.endpointPrivateAccess, true);
  if (!endpointPublicAccess && !endpointPrivateAccess) {
    throw new ValidationError(
      K("cluster.endpointPrivateAccess"),
      false,
      "at least one of endpointPublicAccess and endpointPrivateAccess must be true",
    );
  }
  return {
    version: str(K("cluster.version"), o.version, "1.33", K8S_VERSION),
    admins: strList(K("cluster.admins"), o.admins, [], IAM_PRINCIPAL),
    logTypes,
    endpointPublicAccess,
    endpointPrivateAccess,
    publicAccessCidrs,
  };
}

function readNetwork(v: unknown): NetworkConfig {
  const o = obj(K("network"), v, [
    "mode",
    "cidr",
    "azCount",
    "natGateways",
    "vpcId",
    "privateSubnetIds",
    "publicSubnetIds",
  ]);
  const mode = oneOf(K("network.mode"), o.mode, ["create", "existing"] as const, "create");
  const cidr = str(K("network.cidr"), o.cidr, "10.0.0.0/16");
  const parsed = parseCidr(K("network.cidr"), cidr);
  if (mode === "existing") {
    const subnets = { re: /^subnet-[0-9a-f]{8,17}$/, fix: 'use subnet ids such as "subnet-0abc12345def67890"' };
    const privateSubnetIds = strList(K("network.privateSubnetIds"), o.privateSubnetIds, undefined, subnets);
    if (privateSubnetIds.length < 2) {
      throw new ValidationError(
        K("network.privateSubnetIds"),
        privateSubnetIds,
        "list private subnets in at least 2 availability zones",
      );
    }
    return {
      mode,
      cidr,
      vpcId: str(K("network.vpcId"), o.vpcId, undefined, {
        re: /^vpc-[0-9a-f]{8,17}$/,
        fix: 'use a VPC id such as "vpc-0abc12345def67890"',
      }),
      privateSubnetIds,
      publicSubnetIds: strList(K("network.publicSubnetIds"), o.publicSubnetIds, [], subnets),
    };
  }
  if (parsed.prefix > 20)
    throw new ValidationError(
      K("network.cidr"),
      cidr,
      "use a /20 or larger network (e.g. 10.0.0.0/16): node subnets need room for /28 pod prefixes",
    );
  return {
    mode,
    cidr,
    azCount: int(K("network.azCount"), o.azCount, 2, 2, 6),
    natGateways: oneOf(K("network.natGateways"), o.natGateways, ["single", "perAz"] as const, "single"),
  };
}

function readVpcCni(v: unknown): PlatformConfig["vpcCni"] {
  const o = obj(K("vpcCni"), v, ["prefixDelegation", "warmPrefixTarget", "networkPolicy"]);
  const networkPolicy = bool(K("vpcCni.networkPolicy"), o.networkPolicy, true);
  if (!networkPolicy) {
    throw new ValidationError(
      K("vpcCni.networkPolicy"),
      false,
      "sandbox isolation relies on NetworkPolicy enforcement; remove the key or set it to true",
    );
  }
  return {
    prefixDelegation: bool(K("vpcCni.prefixDelegation"), o.prefixDelegation, true),
    warmPrefixTarget: int(K("vpcCni.warmPrefixTarget"), o.warmPrefixTarget, 1, 0, 16),
    networkPolicy,
  };
}

function readNodeGroup(key: string, v: unknown, def: Omit<NodeGroupConfig, "name">, name: string): NodeGroupConfig {
  const o = obj(key, v, ["name", "instanceType", "minSize", "maxSize", "desiredSize", "diskSizeGiB", "networkLimits"]);
  const instanceType = str(`${key}.instanceType`, o.instanceType, def.instanceType);
  let networkLimits: NodeGroupConfig["networkLimits"];
  if (o.networkLimits !== undefined) {
    const n = obj(`${key}.networkLimits`, o.networkLimits, ["vcpus", "maxEnis", "ipsPerEni"]);
    networkLimits = {
      vcpus: int(`${key}.networkLimits.vcpus`, n.vcpus, undefined, 1, 1024),
      maxEnis: int(`${key}.networkLimits.maxEnis`, n.maxEnis, undefined, 1, 100),
      ipsPerEni: int(`${key}.networkLimits.ipsPerEni`, n.ipsPerEni, undefined, 2, 100),
    };
  }
  resolveInstanceLimits(`${key}.instanceType`, instanceType, networkLimits);
  const minSize = int(`${key}.minSize`, o.minSize, def.minSize, 0, 1000);
  const maxSize = int(`${key}.maxSize`, o.maxSize, Math.max(def.maxSize, minSize), 1, 1000);
  if (maxSize < minSize) throw new ValidationError(`${key}.maxSize`, maxSize, `must be at least minSize (${minSize})`);
  const desiredSize = int(
    `${key}.desiredSize`,
    o.desiredSize,
    Math.min(Math.max(def.desiredSize, minSize), maxSize),
    0,
    1000,
  );
  if (desiredSize < minSize || desiredSize > maxSize) {
    throw new ValidationError(
      `${key}.desiredSize`,
      desiredSize,
      `must be between minSize (${minSize}) and maxSize (${maxSize})`,
    );
  }
  return {
    name: str(`${key}.name`, o.name, name, DNS_LABEL),
    instanceType,
    minSize,
    maxSize,
    desiredSize,
    diskSizeGiB: int(`${key}.diskSizeGiB`, o.diskSizeGiB, def.diskSizeGiB, 20, 16384),
    ...(networkLimits ? { networkLimits } : {}),
  };
}

function readNodeGroups(v: unknown): PlatformConfig["nodeGroups"] {
  const o = obj(K("nodeGroups"), v, ["system", "sandbox", "gpu"]);
  const system = readNodeGroup(
    K("nodeGroups.system"),
    o.system,
    { instanceType: "m7i.large", minSize: 2, maxSize: 4, desiredSize: 2, diskSizeGiB: 50 },
    "system",
  );
  const sandboxRaw = list(K("nodeGroups.sandbox"), o.sandbox, [{}]);
  if (sandboxRaw.length === 0)
    throw new ValidationError(K("nodeGroups.sandbox"), [], "define at least one sandbox node group");
  const sandbox = sandboxRaw.map((g, i) =>
    readNodeGroup(
      K(`nodeGroups.sandbox[${i}]`),
      g,
      { instanceType: "m7i.xlarge", minSize: 1, maxSize: 10, desiredSize: 2, diskSizeGiB: 100 },
      i === 0 ? "sandbox" : `sandbox-${i}`,
    ),
  );
  const names = [system.name, ...sandbox.map((g) => g.name)];
  names.forEach((n, i) => {
    if (names.indexOf(n) !== i)
      throw new ValidationError(
        K(`nodeGroups.sandbox[${i - 1}].name`),
        n,
        "node group names must be unique; rename this group",
      );
  });
  const gpu =
    o.gpu === undefined || o.gpu === null
      ? undefined
      : readNodeGroup(
          K("nodeGroups.gpu"),
          o.gpu,
          { instanceType: "g5.xlarge", minSize: 0, maxSize: 2, desiredSize: 0, diskSizeGiB: 200 },
          "gpu",
        );
  return { system, sandbox, ...(gpu ? { gpu } : {}) };
}

function readImages(v: unknown, mode: PlatformConfig["mode"]): PlatformConfig["images"] {
  const o = obj(K("images"), v, ["profiles", "tag", "catalog"]);
  const profiles = strList(K("images.profiles"), o.profiles, ["base", "data", "web", "ml", "rl"], DNS_LABEL);
  if (profiles.length === 0)
    throw new ValidationError(K("images.profiles"), [], "list at least one image profile (e.g. base)");
  const catalog: Record<string, string> = {};
  if (o.catalog !== undefined) {
    if (!isPlainObject(o.catalog))
      throw new ValidationError(
        K("images.catalog"),
        o.catalog,
        'use a map of profile to image, e.g. {"base": "python:3.12-slim"}',
      );
    for (const [p, img] of Object.entries(o.catalog)) {
      if (!profiles.includes(p))
        throw new ValidationError(
          K(`images.catalog.${p}`),
          img,
          `not a profile; add it to images.profiles (${profiles.join(", ")}) or remove it`,
        );
      catalog[p] = str(K(`images.catalog.${p}`), img);
    }
  }
  if (mode === "existing-cluster") {
    const missing = profiles.filter((p) => !catalog[p]);
    if (missing.length)
      throw new ValidationError(
        K("images.catalog"),
        o.catalog,
        `existing-cluster mode creates no registries; give an image for every profile (missing: ${missing.join(", ")})`,
      );
  }
  return {
    profiles,
    tag: str(K("images.tag"), o.tag, "v1", {
      re: /^[\w][\w.-]{0,127}$/,
      fix: "use an OCI tag such as v1 or 2026-11-29",
    }),
    catalog,
  };
}

// An existing registry for existing-cluster mode: http(s)://host[:port]/repo or host[:port]/repo.
const REPOSITORY_URL = {
  re: /^(https?:\/\/)?[A-Za-z0-9.-]+(:\d{1,5})?\/[a-z0-9]+([._/-][a-z0-9]+)*$/,
  fix: "give <registry>/<repository>, e.g. http://10.244.0.1:5000/sbx-snapshots or registry.example.com/sbx/snapshots",
};

function readSnapshots(v: unknown, mode: PlatformConfig["mode"], hasTokenKey: boolean): PlatformConfig["snapshots"] {
  const o = obj(K("snapshots"), v, [
    "enabled",
    "retentionDays",
    "repositoryUrl",
    "podRegistry",
    "registryToken",
    "layerRegistry",
  ]);
  const repositoryUrl = optStr(K("snapshots.repositoryUrl"), o.repositoryUrl, REPOSITORY_URL);
  if (o.layerRegistry !== undefined) return readWithLayerRegistry(o, mode, hasTokenKey, repositoryUrl);
  // pods moving their own layers (docs/pause-resume.md): all three, and a registry of the stack's
  // own. An address, not a name: the pod's helper is a static binary with no resolver, and the
  // sandboxes' egress rule to the registry (registryEgress) is one address and port
  const podRegistry = optStr(K("snapshots.podRegistry"), o.podRegistry, {
    re: /^http:\/\/(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}:\d{1,5}$/,
    fix: "give http://<IPv4 address>:<port> as the sandbox pods reach the registry (the helper in the pod resolves no names)",
  });
  const registryToken = o.registryToken === undefined ? undefined : readRegistryToken(o.registryToken);
  const given = { podRegistry: !!podRegistry, registryToken: !!registryToken, registryTokenKey: hasTokenKey };
  const missing = Object.entries(given).filter(([, on]) => !on);
  if (missing.length && missing.length < 3) {
    const [name] = missing[0];
    const key = name === "registryTokenKey" ? K(name) : K(`snapshots.${name}`);
    throw new ValidationError(
      key,
      undefined,
      `pods move their own layers only with a token each: set sbx:snapshots.podRegistry, sbx:snapshots.registryToken and the secret sbx:registryTokenKey together (${REGISTRY_TOKEN_HOWTO})`,
    );
  }
  if (podRegistry && !repositoryUrl)
    throw new ValidationError(
      K("snapshots.podRegistry"),
      podRegistry,
      "needs sbx:snapshots.repositoryUrl, a distribution registry in auth: token mode (ECR issues its own tokens)",
    );
  if (repositoryUrl && mode === "eks") {
    throw new ValidationError(
      K("snapshots.repositoryUrl"),
      repositoryUrl,
      "eks mode creates its own ECR repository for snapshots; remove sbx:snapshots.repositoryUrl",
    );
  }
  return {
    enabled: bool(K("snapshots.enabled"), o.enabled, true),
    retentionDays: int(K("snapshots.retentionDays"), o.retentionDays, 7, 1, 3650),
    ...(repositoryUrl ? { repositoryUrl } : {}),
    ...(podRegistry && registryToken ? { podRegistry, registryToken } : {}),
  };
}

/**
 * The platform runs the registry (components/layerRegistry): it takes the place of
 * repositoryUrl and podRegistry, and always comes with the token pair.
 */
// Over 60 lines on purpose: every key of sbx:snapshots with a layer registry, checked in the order docs/stack-
// config.md lists them.
function readWithLayerRegistry(
  o: Raw,
  mode: PlatformConfig["mode"],
  hasTokenKey: boolean,
  repositoryUrl: string | undefined,
): PlatformConfig["snapshots"] {
  const key = K("snapshots.layerRegistry");
  for (const [name, given] of [
    ["repositoryUrl", repositoryUrl],
    ["podRegistry", o.podRegistry],
  ] as const)
    if (given !== undefined)
      throw new ValidationError(
        K(`snapshots.${name}`),
        given,
        "the layer registry is where snapshots go and where pods move their layers: remove this, or remove sbx:snapshots.layerRegistry to use a registry of your own",
      );
  if (o.registryToken === undefined || !hasTokenKey)
    throw new ValidationError(
      o.registryToken === undefined ? K("snapshots.registryToken") : K("registryTokenKey"),
      undefined,
      `the layer registry trusts the runtime's token pair: set sbx:snapshots.registryToken and the secret sbx:registryTokenKey (${REGISTRY_TOKEN_HOWTO})`,
    );
  const r = obj(key, o.layerRegistry ?? {}, ["image", "binary", "storage", "cpu", "memory"]);
  const st = obj(`${key}.storage`, r.storage ?? {}, ["kind", "size", "storageClassName", "sizeLimit"]);
  // eks: a bucket the platform makes; elsewhere no AWS is reached, so a volume claim
  const kind = oneOf(
    `${key}.storage.kind`,
    st.kind,
    ["s3", "volume", "emptyDir"] as const,
    mode === "eks" ? "s3" : "volume",
  );
  if (kind === "s3" && mode !== "eks")
    throw new ValidationError(
      `${key}.storage.kind`,
      kind,
      "s3 storage is made in eks mode only (the platform creates the bucket and its role there); use volume here",
    );
  const size = (field: string, v: unknown, def: string) => {
    const q = quantity(`${key}.storage.${field}`, v, def);
    parseMemory(`${key}.storage.${field}`, q);
    return q;
  };
  const storage: LayerRegistryConfig["storage"] =
    kind === "s3"
      ? { kind }
      : kind === "volume"
        ? {
            kind,
            size: size("size", st.size, "20Gi"),
            ...(st.storageClassName === undefined
              ? {}
              : {
                  storageClassName: str(
                    `${key}.storage.storageClassName`,
                    st.storageClassName,
                    undefined,
                    DNS_SUBDOMAIN,
                  ),
                }),
          }
        : { kind, sizeLimit: size("sizeLimit", st.sizeLimit, "20Gi") };
  const cpu = quantity(`${key}.cpu`, r.cpu, "250m");
  const memory = quantity(`${key}.memory`, r.memory, "256Mi");
  parseCpu(`${key}.cpu`, cpu);
  parseMemory(`${key}.memory`, memory);
  return {
    enabled: bool(K("snapshots.enabled"), o.enabled, true),
    retentionDays: int(K("snapshots.retentionDays"), o.retentionDays, 7, 1, 3650),
    registryToken: readRegistryToken(o.registryToken),
    layerRegistry: {
      image: str(`${key}.image`, r.image, "registry:3.0.0", {
        re: /^[\w][\w.:/@-]{0,254}$/,
        fix: "give an image reference such as registry:3.0.0 or <account>.dkr.ecr.<region>.amazonaws.com/registry:3.0.0",
      }),
      binary: str(`${key}.binary`, r.binary, "/bin/registry", {
        re: /^\/[\w./-]+$/,
        fix: "give the absolute path of the registry binary inside the image (/bin/registry in the official image)",
      }),
      storage,
      cpu,
      memory,
    },
  };
}

const DNS_SUBDOMAIN = {
  re: /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/,
  fix: "give a StorageClass name: lowercase letters, digits, '-' and '.'",
};

const REGISTRY_TOKEN_HOWTO =
  "`sbx registry-token-key --dir DIR`, then `pulumi config set --path sbx:snapshots.registryToken.certificate < DIR/cert.pem` and `pulumi config set --secret sbx:registryTokenKey < DIR/key.pem`";

/**
 * The registry token pair's public half and the names the registry checks. The private key is
 * the secret sbx:registryTokenKey, which the schema never sees; the runtime component checks
 * that it is this certificate's key.
 */
function readRegistryToken(v: unknown): NonNullable<PlatformConfig["snapshots"]["registryToken"]> {
  const o = obj(K("snapshots.registryToken"), v, ["certificate", "issuer", "service", "ttlSeconds"]);
  const certificate = str(K("snapshots.registryToken.certificate"), o.certificate);
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certificate);
  } catch (err) {
    throw new ValidationError(
      K("snapshots.registryToken.certificate"),
      certificate.slice(0, 40),
      `is not a PEM certificate (${(err as Error).message}); give the cert.pem of ${REGISTRY_TOKEN_HOWTO}`,
    );
  }
  const details = cert.publicKey.asymmetricKeyDetails;
  if (cert.publicKey.asymmetricKeyType !== "ec" || details?.namedCurve !== "prime256v1")
    throw new ValidationError(
      K("snapshots.registryToken.certificate"),
      cert.subject,
      "must hold an EC P-256 key (the runtime signs ES256 tokens); make the pair with `sbx registry-token-key`",
    );
  const NAME = { re: TOKEN_NAME_RE, fix: "give the registry's value: printable characters, no spaces" };
  const d = TOKEN_AUTH_DEFAULTS;
  return {
    certificate,
    issuer: str(K("snapshots.registryToken.issuer"), o.issuer, d.issuer, NAME),
    service: str(K("snapshots.registryToken.service"), o.service, d.service, NAME),
    ttlSeconds: int(K("snapshots.registryToken.ttlSeconds"), o.ttlSeconds, d.ttlSeconds, 60, 86_400),
  };
}

/**
 * Sandboxes reach the registry they move their own layers to: the layer registry's pods by
 * label, or snapshots.podRegistry at that address and port alone. A /32 is never cut by
 * blockedCidrs (only ranges strictly inside).
 */
export function registryEgress(s: PlatformConfig["snapshots"], runtimeNamespace: string): EgressRule[] {
  if (!s.enabled) return [];
  // the layer registry's pods, by label: the runtime hands sandboxes their pod address
  if (s.layerRegistry)
    return [
      {
        kind: "pods",
        namespace: runtimeNamespace,
        podLabels: { ...LAYER_REGISTRY_LABELS },
        ports: [LAYER_REGISTRY.port],
      },
    ];
  if (!s.podRegistry) return [];
  const u = new URL(s.podRegistry);
  return [{ kind: "cidr", cidr: `${u.hostname}/32`, ports: [Number(u.port || 80)] }];
}

function readOutputs(v: unknown): PlatformConfig["outputs"] {
  const o = obj(K("outputs"), v, ["expirationDays"]);
  return { expirationDays: int(K("outputs.expirationDays"), o.expirationDays, 30, 1, 3650) };
}

function readNamespaces(v: unknown): PlatformConfig["namespaces"] {
  const o = obj(K("namespaces"), v, ["sandbox", "runtime"]);
  const sandbox = str(K("namespaces.sandbox"), o.sandbox, "sbx-sandboxes", DNS_LABEL);
  const runtime = str(K("namespaces.runtime"), o.runtime, "sbx-system", DNS_LABEL);
  if (sandbox === runtime)
    throw new ValidationError(
      K("namespaces.runtime"),
      runtime,
      "must differ from namespaces.sandbox: sandboxes never share a namespace with the runtime",
    );
  return { sandbox, runtime };
}

function readSizeClasses(v: unknown): Record<string, SizeClassConfig> {
  if (v === undefined || v === null) return structuredClone(DEFAULT_SIZE_CLASSES) as Record<string, SizeClassConfig>;
  if (!isPlainObject(v) || Object.keys(v).length === 0) {
    throw new ValidationError(
      K("sizeClasses"),
      v,
      'use a map of size name to {cpuRequest, cpuLimit, memoryRequest, memoryLimit}, e.g. {"nano": {...}}',
    );
  }
  const out: Record<string, SizeClassConfig> = {};
  for (const [name, s] of Object.entries(v)) {
    const key = K(`sizeClasses.${name}`);
    str(key, name, undefined, DNS_LABEL);
    const o = obj(key, s, ["cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit", "workspace", "tmp", "pids"]);
    const sc: SizeClassConfig = {
      cpuRequest: quantity(`${key}.cpuRequest`, o.cpuRequest),
      cpuLimit: quantity(`${key}.cpuLimit`, o.cpuLimit),
      memoryRequest: quantity(`${key}.memoryRequest`, o.memoryRequest),
      memoryLimit: quantity(`${key}.memoryLimit`, o.memoryLimit),
      workspace: quantity(`${key}.workspace`, o.workspace, "1Gi"),
      tmp: quantity(`${key}.tmp`, o.tmp, "256Mi"),
      pids: int(`${key}.pids`, o.pids, 256, 16, 65536),
    };
    if (parseCpu(`${key}.cpuLimit`, sc.cpuLimit) < parseCpu(`${key}.cpuRequest`, sc.cpuRequest)) {
      throw new ValidationError(`${key}.cpuLimit`, sc.cpuLimit, `must be at least cpuRequest (${sc.cpuRequest})`);
    }
    if (parseMemory(`${key}.memoryLimit`, sc.memoryLimit) < parseMemory(`${key}.memoryRequest`, sc.memoryRequest)) {
      throw new ValidationError(
        `${key}.memoryLimit`,
        sc.memoryLimit,
        `must be at least memoryRequest (${sc.memoryRequest})`,
      );
    }
    parseMemory(`${key}.workspace`, sc.workspace);
    parseMemory(`${key}.tmp`, sc.tmp);
    out[name] = sc;
  }
  return out;
}

function readBudget(v: unknown): PlatformConfig["budget"] {
  const o = obj(K("budget"), v, ["cpu", "memory", "pods"]);
  const cpu = quantity(K("budget.cpu"), o.cpu, "16");
  const memory = quantity(K("budget.memory"), o.memory, "32Gi");
  parseCpu(K("budget.cpu"), cpu);
  parseMemory(K("budget.memory"), memory);
  const pods = o.pods === undefined ? undefined : int(K("budget.pods"), o.pods, undefined, 1, 100000);
  return { cpu, memory, ...(pods !== undefined ? { pods } : {}) };
}

function readDefaults(
  v: unknown,
  sizes: Record<string, SizeClassConfig>,
  profiles: string[],
): PlatformConfig["defaults"] {
  const o = obj(K("defaults"), v, [
    "profile",
    "size",
    "ttlSeconds",
    "maxTtlSeconds",
    "idleTimeoutSeconds",
    "finishedGraceSeconds",
  ]);
  const d = {
    profile: str(K("defaults.profile"), o.profile, profiles.includes("base") ? "base" : profiles[0]),
    size: str(K("defaults.size"), o.size, sizes.nano ? "nano" : Object.keys(sizes)[0]),
    ttlSeconds: int(K("defaults.ttlSeconds"), o.ttlSeconds, 3600, 1, 7 * 86400),
    maxTtlSeconds: int(K("defaults.maxTtlSeconds"), o.maxTtlSeconds, 86400, 1, 7 * 86400),
    idleTimeoutSeconds: int(K("defaults.idleTimeoutSeconds"), o.idleTimeoutSeconds, 900, 0, 7 * 86400),
    finishedGraceSeconds: int(K("defaults.finishedGraceSeconds"), o.finishedGraceSeconds, 60, 0, 86400),
  };
  if (!profiles.includes(d.profile))
    throw new ValidationError(K("defaults.profile"), d.profile, `use one of images.profiles: ${profiles.join(", ")}`);
  if (!sizes[d.size])
    throw new ValidationError(
      K("defaults.size"),
      d.size,
      `use one of the size classes: ${Object.keys(sizes).join(", ")}`,
    );
  if (d.ttlSeconds > d.maxTtlSeconds)
    throw new ValidationError(
      K("defaults.ttlSeconds"),
      d.ttlSeconds,
      `must not exceed defaults.maxTtlSeconds (${d.maxTtlSeconds})`,
    );
  return d;
}

function readWarmPool(
  v: unknown,
  sizes: Record<string, SizeClassConfig>,
  profiles: string[],
): PlatformConfig["warmPool"] {
  return list(K("warmPool"), v, []).map((entry, i) => {
    const key = K(`warmPool[${i}]`);
    const o = obj(key, entry, ["profile", "size", "count"]);
    const profile = str(`${key}.profile`, o.profile);
    const size = str(`${key}.size`, o.size);
    if (!profiles.includes(profile))
      throw new ValidationError(`${key}.profile`, profile, `use one of images.profiles: ${profiles.join(", ")}`);
    if (!sizes[size])
      throw new ValidationError(`${key}.size`, size, `use one of the size classes: ${Object.keys(sizes).join(", ")}`);
    return { profile, size, count: int(`${key}.count`, o.count, undefined, 0, 10000) };
  });
}

const METADATA_CIDR = parseCidr("metadata", "169.254.169.254/32");

function readEgress(v: unknown, sandboxNamespace: string): EgressRule[] {
  return list(K("egress"), v, []).map((entry, i): EgressRule => {
    const key = K(`egress[${i}]`);
    const o = obj(key, entry, ["cidr", "namespace", "podLabels", "ports"]);
    const ports = list(`${key}.ports`, o.ports, []).map((p, j) => int(`${key}.ports[${j}]`, p, undefined, 1, 65535));
    if (o.cidr !== undefined) {
      if (o.namespace !== undefined)
        throw new ValidationError(
          `${key}.namespace`,
          o.namespace,
          "an egress rule has either cidr or namespace, not both; split it into two rules",
        );
      const cidr = str(`${key}.cidr`, o.cidr);
      const parsed = parseCidr(`${key}.cidr`, cidr);
      if (cidrContains(METADATA_CIDR, parsed)) {
        throw new ValidationError(
          `${key}.cidr`,
          cidr,
          "the instance metadata endpoint is never reachable from sandboxes; remove this rule",
        );
      }
      return { kind: "cidr", cidr, ports };
    }
    const namespace = str(`${key}.namespace`, o.namespace, undefined, {
      ...DNS_LABEL,
      fix: `set cidr or namespace; ${DNS_LABEL.fix}`,
    });
    if (namespace === sandboxNamespace) {
      throw new ValidationError(
        `${key}.namespace`,
        namespace,
        "sandboxes never reach other sandboxes; point the rule at the namespace of the service they need (e.g. a tool gateway)",
      );
    }
    const podLabels: Record<string, string> = {};
    if (o.podLabels !== undefined) {
      if (!isPlainObject(o.podLabels))
        throw new ValidationError(`${key}.podLabels`, o.podLabels, 'use a label map such as {"app": "tool-gateway"}');
      for (const [lk, lv] of Object.entries(o.podLabels)) podLabels[lk] = str(`${key}.podLabels.${lk}`, lv);
    }
    return { kind: "pods", namespace, podLabels, ports };
  });
}

/** Pod Identity credentials -> base role is role chaining, which STS caps at one hour. */
function readCredentialDuration(v: unknown): number {
  const seconds = int(K("runtime.credentialDurationSeconds"), v, 900, 900, 43200);
  if (seconds > 3600) {
    throw new ValidationError(
      K("runtime.credentialDurationSeconds"),
      seconds,
      "the manager assumes the base role with Pod Identity credentials (role chaining), which STS caps at 3600 seconds; use 900-3600",
    );
  }
  return seconds;
}

function readBlockedCidrs(v: unknown): string[] {
  const cidrs = strList(K("blockedCidrs"), v, []);
  for (const [i, c] of cidrs.entries()) parseCidr(K(`blockedCidrs[${i}]`), c);
  return cidrs;
}

function readRuntime(v: unknown): PlatformConfig["runtime"] {
  const o = obj(K("runtime"), v, [
    "image",
    "nodeImage",
    "managerReplicas",
    "controllerReplicas",
    "cpu",
    "memory",
    "runtimeClassName",
    "userNamespaces",
    "credentialDurationSeconds",
  ]);
  const cpu = quantity(K("runtime.cpu"), o.cpu, "500m");
  const memory = quantity(K("runtime.memory"), o.memory, "512Mi");
  parseCpu(K("runtime.cpu"), cpu);
  parseMemory(K("runtime.memory"), memory);
  const image = optStr(K("runtime.image"), o.image);
  const runtimeClassName = optStr(K("runtime.runtimeClassName"), o.runtimeClassName, DNS_LABEL);
  return {
    ...(image ? { image } : {}),
    nodeImage: str(K("runtime.nodeImage"), o.nodeImage, "node:20-bookworm-slim", {
      re: /^[\w./-]+(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$/,
      fix: 'use an image reference such as "node:20-bookworm-slim"',
    }),
    managerReplicas: int(K("runtime.managerReplicas"), o.managerReplicas, 2, 1, 20),
    controllerReplicas: int(K("runtime.controllerReplicas"), o.controllerReplicas, 2, 1, 5),
    cpu,
    memory,
    ...(runtimeClassName ? { runtimeClassName } : {}),
    userNamespaces: bool(K("runtime.userNamespaces"), o.userNamespaces, false),
    credentialDurationSeconds: readCredentialDuration(o.credentialDurationSeconds),
  };
}
