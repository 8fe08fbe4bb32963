// The runtime's one config schema. Written as JSON by the Pulumi Runtime component (a
// ConfigMap mounted at /etc/sbx/config.json) or by `npm start` for the local platform;
// validated once at start into a typed RuntimeConfig. Errors name the key, the value, the fix.
import { z } from "zod";
import { ValidationError } from "../core/errors.ts";
import { parseCpu, parseMemory } from "../core/quantity.ts";
import type { SizeClass } from "../core/types.ts";
import { authConfigInput } from "./authSchema.ts";
import { resolveTenancy, TENANCY_DEFAULTS, type TenancyConfig, tenancyInput } from "./tenancy.ts";

export { resolveTenancy, type TenancyConfig, type TenancyInput, tenancyInput } from "./tenancy.ts";

const quantity = z.union([z.string(), z.number()]);

export const sizeClassInput = z.object({
  cpuRequest: quantity,
  cpuLimit: quantity,
  memoryRequest: quantity,
  memoryLimit: quantity,
  workspace: quantity.default("1Gi"),
  tmp: quantity.default("256Mi"),
  pids: z.number().int().positive().default(256),
});

export const DEFAULT_SIZE_CLASSES: Record<string, z.output<typeof sizeClassInput>> = {
  nano: {
    cpuRequest: "100m",
    cpuLimit: "1",
    memoryRequest: "128Mi",
    memoryLimit: "512Mi",
    workspace: "1Gi",
    tmp: "256Mi",
    pids: 128,
  },
  small: {
    cpuRequest: "250m",
    cpuLimit: "1",
    memoryRequest: "512Mi",
    memoryLimit: "1Gi",
    workspace: "2Gi",
    tmp: "512Mi",
    pids: 256,
  },
  medium: {
    cpuRequest: "1",
    cpuLimit: "2",
    memoryRequest: "2Gi",
    memoryLimit: "4Gi",
    workspace: "8Gi",
    tmp: "1Gi",
    pids: 512,
  },
  large: {
    cpuRequest: "2",
    cpuLimit: "4",
    memoryRequest: "8Gi",
    memoryLimit: "16Gi",
    workspace: "20Gi",
    tmp: "2Gi",
    pids: 1024,
  },
};

/** snapshots.tokenAuth's defaults, which the stack schema and `sbx registry-token-key` share */
export const TOKEN_AUTH_DEFAULTS = { issuer: "sbx", service: "sbx-registry", ttlSeconds: 900 } as const;
/** what a registry's auth.token issuer or service may be where we check it: printable, no spaces */
export const TOKEN_NAME_RE = /^[\x21-\x7e]{1,253}$/;

/**
 * distribution's `auth: token` section (the test registries, `sbx registry-token-key`, and the
 * registry the platform deploys all trust the runtime with it). The realm is required but never asked: the runtime signs
 * its tokens itself and hands sandboxes theirs, so nobody fetches one.
 */
export function tokenAuthConfig(t: { issuer: string; service: string }, certPath: string): string[] {
  return [
    "auth:",
    "  token:",
    "    realm: https://sbx.invalid/registry-tokens-are-issued-by-the-sbx-runtime",
    `    service: ${JSON.stringify(t.service)}`,
    `    issuer: ${JSON.stringify(t.issuer)}`,
    `    rootcertbundle: ${certPath}`,
  ];
}

/** An in-cluster registry Service as the runtime names it: http://<service>.<namespace>.svc[.cluster.local]:<port>. */
const IN_CLUSTER_REGISTRY_RE =
  /^http:\/\/([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)\.([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)\.svc(?:\.cluster\.local)?:(\d{1,5})$/;

/** The Service behind snapshots.registry when snapshots.inCluster is set; undefined if it does not name one. */
export function inClusterRegistryOf(registry: string): { name: string; namespace: string; port: number } | undefined {
  const m = IN_CLUSTER_REGISTRY_RE.exec(registry);
  if (!m) return undefined;
  const port = Number(m[3]);
  return port >= 1 && port <= 65535 ? { name: m[1], namespace: m[2], port } : undefined;
}

export const runtimeConfigInput = z.object({
  /** which Backend: the embedded default is local */
  platform: z.enum(["local", "kubernetes"]).default("local"),
  listen: z
    .object({ host: z.string().default("127.0.0.1"), port: z.number().int().min(0).max(65535).default(8080) })
    .default({ host: "127.0.0.1", port: 8080 }),
  sizeClasses: z.record(z.string(), sizeClassInput).default(DEFAULT_SIZE_CLASSES),
  /** admission budget: total CPU and memory requests all live sandboxes may reserve */
  budget: z
    .object({ cpu: quantity.default("4"), memory: quantity.default("8Gi") })
    .default({ cpu: "4", memory: "8Gi" }),
  defaults: z
    .object({
      profile: z.string().default("base"),
      size: z.string().default("nano"),
      ttlSeconds: z.number().int().positive().default(3600),
      maxTtlSeconds: z.number().int().positive().default(86400),
      idleTimeoutSeconds: z.number().int().min(0).default(900),
      /** finished (terminal) sandboxes are deleted after this grace */
      finishedGraceSeconds: z.number().int().min(0).default(60),
    })
    .default({
      profile: "base",
      size: "nano",
      ttlSeconds: 3600,
      maxTtlSeconds: 86400,
      idleTimeoutSeconds: 900,
      finishedGraceSeconds: 60,
    }),
  /** warm pool targets per (profile, size) */
  warmPool: z.array(z.object({ profile: z.string(), size: z.string(), count: z.number().int().min(0) })).default([]),
  /** profile -> image. Inline, or a JSON file (catalogPath) that is reloaded on change. */
  catalog: z.record(z.string(), z.string()).default({ base: "host" }),
  catalogPath: z.string().optional(),
  /** JSON file: { "<sha256 hex of token>": "<owner>" } */
  tokensPath: z.string().optional(),
  /** ---- identities: JWT issuers accepted besides the tokens file (authSchema.ts, docs/identity.md) ---- */
  auth: authConfigInput,
  kubernetes: z
    .object({
      namespace: z.string().default("sbx-sandboxes"),
      runtimeNamespace: z.string().default("sbx-system"),
      runtimeClassName: z.string().optional(),
      /**
       * Run sandbox pods in their own user namespace (`hostUsers: false`): root or a breakout in
       * the container is an unprivileged uid on the node. Needs Kubernetes >= 1.33, Linux >= 6.3
       * and containerd >= 2.0 or CRI-O >= 1.25 on the nodes (docs/kubernetes-runtime.md).
       */
      userNamespaces: z.boolean().default(false),
      kubeconfigPath: z.string().optional(),
      leaseName: z.string().default("sbx-controller"),
      /**
       * One admission budget across several manager replicas (docs/kubernetes-runtime.md): each
       * admits within a share held in the Lease `<leaseName>-shares` in runtimeNamespace. Off:
       * every replica admits against the whole budget (right for exactly one replica).
       */
      budgetShares: z
        .object({
          enabled: z.boolean().default(false),
          /** a replica whose share has not been renewed for this long is dead; its share is freed */
          leaseSeconds: z.number().min(1).max(300).default(15),
          /** how often a replica reads the shares (a write only on change or renewal) */
          tickMs: z.number().int().min(50).max(10_000).default(500),
          /** free room a replica keeps ahead of its use, as a fraction of its fair part */
          headroomFraction: z.number().min(0).max(1).default(0.1),
        })
        .strict()
        .default({ enabled: false, leaseSeconds: 15, tickMs: 500, headroomFraction: 0.1 }),
    })
    .default({
      namespace: "sbx-sandboxes",
      runtimeNamespace: "sbx-system",
      userNamespaces: false,
      leaseName: "sbx-controller",
      budgetShares: { enabled: false, leaseSeconds: 15, tickMs: 500, headroomFraction: 0.1 },
    }),
  local: z
    .object({
      /** where sandboxes' writable dirs and state live */
      stateDir: z.string().default(".sbx-local"),
    })
    .default({ stateDir: ".sbx-local" }),
  credentials: z
    .object({
      baseRoleArn: z.string(),
      bucket: z.string(),
      region: z.string(),
      durationSeconds: z.number().int().min(900).max(43200).default(900),
    })
    .optional(),
  snapshots: z
    .object({
      registry: z.string(),
      repository: z.string().default("sbx-snapshots"),
      retentionDays: z.number().int().positive().default(7),
      /**
       * The registry as sandbox pods reach it, e.g. http://127.0.0.1:5000 on the test cluster.
       * Set: a Kubernetes sandbox pushes and pulls its own snapshot layers through its helper,
       * so the bytes skip the API server's exec path (runtime/k8s/podLayers.ts); a pod that
       * cannot falls back to the replica moving them. Plain http only for now. With tokenAuth
       * each pod gets a token for its own repository alone; without it the pods need a registry
       * without login (one tenant only): the replica never hands its own login to a sandbox.
       */
      /**
       * The registry is a Service in this cluster (the one the platform deploys with
       * sbx:snapshots.layerRegistry): registry is http://<service>.<namespace>.svc:<port>, and
       * replicas and sandbox pods both reach it at one of its ready pods, read from the Service's
       * EndpointSlices (runtime/k8s/registryEndpoint.ts). So neither cluster DNS nor a ClusterIP
       * is needed on the way, and a NetworkPolicy that admits the registry's pods by label
       * matches what the pods send. Implies pods moving their own layers (podRegistry stays
       * unset) and needs tokenAuth.
       */
      inCluster: z.boolean().optional(),
      podRegistry: z
        .string()
        .regex(/^http:\/\/[^/\s]+$/, {
          message: "use http://host:port as the pods reach it (https and a path are not supported yet)",
        })
        .optional(),
      /**
       * Registry login. ECR hosts (<account>.dkr.ecr.<region>.amazonaws.com) log in with the
       * runtime's AWS identity on their own; set this for an htpasswd registry (the password
       * file is typically a mounted Secret). Unset: anonymous.
       */
      auth: z
        .object({ username: z.string().min(1), passwordFile: z.string().min(1) })
        .strict()
        .optional(),
      /**
       * The runtime signs the registry's tokens itself (distribution's `auth: token` with this
       * certificate as its rootcertbundle; runtime/snapshot/registryToken.ts): its own, and with
       * podRegistry one per sandbox for that sandbox's repository alone. keyFile and certFile are
       * typically a mounted Secret; `sbx registry-token-key` makes the pair.
       */
      tokenAuth: z
        .object({
          keyFile: z.string().min(1),
          certFile: z.string().min(1),
          /** the registry's auth.token.issuer */
          issuer: z.string().min(1).default(TOKEN_AUTH_DEFAULTS.issuer),
          /** the registry's auth.token.service */
          service: z.string().min(1).default(TOKEN_AUTH_DEFAULTS.service),
          /** how long a token is good for: it must outlast the longest layer transfer */
          ttlSeconds: z.number().int().min(60).max(86_400).default(TOKEN_AUTH_DEFAULTS.ttlSeconds),
        })
        .strict()
        .optional(),
    })
    .refine((s) => !(s.auth && s.tokenAuth), {
      path: ["tokenAuth"],
      message:
        "auth (an htpasswd login) and tokenAuth (the runtime signs the registry's tokens) exclude each other; keep one",
    })
    .refine((s) => !(s.podRegistry && !s.tokenAuth && (s.auth || /\.dkr\.ecr\./.test(s.registry))), {
      path: ["podRegistry"],
      message:
        "pods moving their own layers need tokenAuth (a token per sandbox) or a registry without login (the replica's login is never handed to a sandbox), and ECR is not supported yet; set tokenAuth or unset podRegistry",
    })
    .refine((s) => !s.inCluster || (!!inClusterRegistryOf(s.registry) && !!s.tokenAuth && !s.podRegistry && !s.auth), {
      path: ["inCluster"],
      message:
        "an in-cluster registry needs registry http://<service>.<namespace>.svc:<port>, tokenAuth, and no podRegistry or auth (its pods are where both replicas and sandboxes go)",
    })
    .refine((s) => !(s.tokenAuth && /\.dkr\.ecr\./.test(s.registry)), {
      path: ["tokenAuth"],
      message: "ECR issues its own tokens; unset tokenAuth for an ECR registry",
    })
    .optional(),
  /** per-sandbox resource figures (runtime/core/resourceSampler.ts, docs/resources.md) */
  resources: z
    .object({
      /** how often every live sandbox is read; 0 turns the sampler off */
      sampleIntervalMs: z
        .number()
        .int()
        .refine((n) => n === 0 || (n >= 500 && n <= 300_000), {
          message: "use 0 (off) or 500-300000 ms",
        })
        .default(5000),
      /** how far back each sandbox's history reaches (at most this / sampleIntervalMs samples) */
      historySeconds: z.number().int().min(60).max(86_400).default(3600),
      /** warn (log and the sandbox's events) when its memory passes this fraction of its limit */
      memoryWarnFraction: z.number().gt(0).max(1).default(0.9),
    })
    .strict()
    .default({ sampleIntervalMs: 5000, historySeconds: 3600, memoryWarnFraction: 0.9 }),
  audit: z.object({ path: z.string().optional() }).default({}),
  /** traffic to sandbox ports through the service (docs/ports.md) */
  ports: z
    .object({
      /** host form {port}-{id}.{domain}, for deployments with wildcard DNS (and TLS) for it */
      domain: z
        .string()
        .regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/i, {
          message: "use a DNS name such as sbx.example.com (no scheme, port or wildcard)",
        })
        .optional(),
      /** longest a request to a paused sandbox's port is held while it wakes; then 503 + Retry-After */
      wakeHoldSeconds: z.number().positive().max(300).default(30),
      /** after a wake, how long a refused connect is retried while the server inside starts */
      connectRetrySeconds: z.number().min(0).max(300).default(10),
    })
    .strict()
    .default({ wakeHoldSeconds: 30, connectRetrySeconds: 10 }),
  // ---- tenancy: teams, their quotas and guarantees (runtime/config/tenancy.ts, docs/tenancy.md) ----
  tenancy: tenancyInput.default(TENANCY_DEFAULTS),
  // ---- end tenancy ----
});

export type RuntimeConfigInput = z.input<typeof runtimeConfigInput>;
type Parsed = z.output<typeof runtimeConfigInput>;

export interface RuntimeConfig extends Omit<Parsed, "sizeClasses" | "budget" | "tenancy"> {
  sizeClasses: Record<string, SizeClass>;
  budget: { cpuMillis: number; memoryBytes: number };
  tenancy: TenancyConfig;
}

/** Validate once at start. Throws ValidationError naming the first bad key. */
export function validateRuntimeConfig(input: unknown): RuntimeConfig {
  const parsed = runtimeConfigInput.safeParse(input ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = issue.path.join(".") || "(root)";
    throw new ValidationError(`config.${key}`, valueAt(input, issue.path), issue.message);
  }
  const cfg = parsed.data;
  const sizeClasses: Record<string, SizeClass> = {};
  for (const [name, s] of Object.entries(cfg.sizeClasses)) {
    const k = `config.sizeClasses.${name}`;
    const sc: SizeClass = {
      name,
      cpuRequestMillis: parseCpu(`${k}.cpuRequest`, s.cpuRequest),
      cpuLimitMillis: parseCpu(`${k}.cpuLimit`, s.cpuLimit),
      memoryRequestBytes: parseMemory(`${k}.memoryRequest`, s.memoryRequest),
      memoryLimitBytes: parseMemory(`${k}.memoryLimit`, s.memoryLimit),
      workspaceBytes: parseMemory(`${k}.workspace`, s.workspace),
      tmpBytes: parseMemory(`${k}.tmp`, s.tmp),
      pids: s.pids,
    };
    if (sc.cpuLimitMillis < sc.cpuRequestMillis)
      throw new ValidationError(`${k}.cpuLimit`, s.cpuLimit, "must be at least cpuRequest");
    if (sc.memoryLimitBytes < sc.memoryRequestBytes)
      throw new ValidationError(`${k}.memoryLimit`, s.memoryLimit, "must be at least memoryRequest");
    sizeClasses[name] = sc;
  }
  if (!sizeClasses[cfg.defaults.size]) {
    throw new ValidationError(
      "config.defaults.size",
      cfg.defaults.size,
      `use one of the size classes: ${Object.keys(sizeClasses).join(", ")}`,
    );
  }
  for (const [i, p] of cfg.warmPool.entries()) {
    if (!sizeClasses[p.size])
      throw new ValidationError(
        `config.warmPool[${i}].size`,
        p.size,
        `use one of: ${Object.keys(sizeClasses).join(", ")}`,
      );
  }
  if (cfg.defaults.ttlSeconds > cfg.defaults.maxTtlSeconds) {
    throw new ValidationError(
      "config.defaults.ttlSeconds",
      cfg.defaults.ttlSeconds,
      `must not exceed defaults.maxTtlSeconds (${cfg.defaults.maxTtlSeconds})`,
    );
  }
  const budget = {
    cpuMillis: parseCpu("config.budget.cpu", cfg.budget.cpu),
    memoryBytes: parseMemory("config.budget.memory", cfg.budget.memory),
  };
  return { ...cfg, sizeClasses, budget, tenancy: resolveTenancy(cfg.tenancy, budget) };
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let v: unknown = input;
  for (const p of path) v = v && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[p] : undefined;
  return v;
}
