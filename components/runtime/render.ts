// Every Kubernetes object the runtime needs, as plain data. Pure. `S` is the type of the few
// values that come from other resources (config JSON, hashes): plain strings in tests and
// the dry-run, Pulumi Outputs in the component.
import { parseMemory } from "../../runtime/core/quantity.ts";
import { type PolicyRule, roleRules, sandboxCrd } from "../../runtime/k8s/contract.ts";
import { type K8sObject, partOf, restrictedContainerSecurity, restrictedPodSecurity } from "../shared/k8s.ts";
import type { RuntimeDelivery } from "./args.ts";
import { BUNDLE_FILE, bundlePartKey } from "./bundle.ts";
import { HTTP_PORT, LEASE_NAME, PATHS } from "./config.ts";

export const NAMES = {
  manager: "sbx-manager",
  controller: "sbx-controller",
  config: "sbx-config",
  catalog: "sbx-catalog",
  tokens: "sbx-api-tokens",
  registryToken: "sbx-registry-token",
  bundlePrefix: "sbx-runtime-",
} as const;
export const ANNOTATION_RUNTIME_SHA = "sbx.dev/runtime-sha256";
export const ANNOTATION_CONFIG_SHA = "sbx.dev/config-sha256";
const RUNTIME_DIR = "/opt/sbx";

/**
 * The runtime process's memory settings, in both Deployments' env (and `npm start`'s, in
 * package.json), measured at 1,000 sandboxes in docs/benchmarks.md ("Manager memory ...").
 * - MALLOC_MMAP_THRESHOLD_: glibc keeps what bursts of short-lived connections freed (a channel's
 *   open is three websockets and a 1 MiB helper copy) and its dynamic mmap threshold climbs to
 *   32 MiB, so that memory stays resident, fragmented by the connections that stay open. Fixed at
 *   64 KiB, every allocation of 64 KiB or more is mapped on its own and unmapped when freed (the
 *   TLS sockets' 64 KiB read buffers among them, whose untouched pages never become resident).
 *   Cost: an mmap and munmap per such allocation.
 * - NODE_OPTIONS=--max-old-space-size (runtimeHeapEnv, from the container's memory limit).
 * Not set: V8's --max-semi-space-size=4 (NODE_OPTIONS). It cut the young generation's resident
 *   32 MiB to 8 and RSS by 30-120 MiB, but in both runs that had it creates during the streaming
 *   execs took 0.5-3.4 s (p50) instead of 3-16 ms: tried, not kept.
 */
export const RUNTIME_PROCESS_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: "65536" };

/**
 * V8's old-space limit for a runtime container: half its memory limit (512 MiB at 1Gi), leaving
 * the other half for what lives outside the JavaScript heap (node itself, the TLS sockets of
 * open channels, the young generation). Without it V8 sizes the heap from the host's memory, and
 * with a maximum of 2 GiB or more its heap controller lets old space grow to up to 4x the live
 * heap before a full collection; with a smaller maximum it grows by ~1.3-2x. At 1,000 sandboxes
 * with 1,000 streaming execs the live heap is ~35-80 MiB, so the manager peaked at 396-446 MiB
 * mostly of garbage, and at 302 with 512 MiB, at the same CPU per exec (docs/benchmarks.md,
 * "Manager memory ..."). Caps near the live heap (128 and 192 MiB) collected all the time.
 */
export function runtimeHeapEnv(memory: string): Record<string, string> {
  const mib = Math.floor(parseMemory("resources.memory", memory) / 2 / 2 ** 20);
  return { NODE_OPTIONS: `--max-old-space-size=${mib}` };
}

export type Role = "manager" | "controller";

export interface RuntimeRenderInput<S = string> {
  namespace: string;
  sandboxNamespace: string;
  delivery: RuntimeDelivery;
  managerReplicas: number;
  controllerReplicas: number;
  resources: { cpu: string; memory: string };
  nodeSelector?: Record<string, string>;
  configJson: S;
  catalogJson: S;
  tokensJson: S;
  /** sha256 of config.json + catalog: a config change rolls the pods */
  configSha: S;
  /** the registry token key pair (args.ts PodLayersSettings): a Secret mounted into both roles */
  registryToken?: { keyPem: S; certPem: S };
}

/** The ConfigMap holding part `part` of the bundle whose hash is sha256. */
export function bundleConfigMapName(sha256: string, part: number): string {
  return `${NAMES.bundlePrefix}${sha256.slice(0, 12)}-${part}`;
}

export function renderNamespace(namespace: string): K8sObject {
  const psa = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
  };
  return {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name: namespace, labels: { ...partOf("runtime"), ...psa } },
  };
}

/**
 * The Sandbox CRD. It is cluster-wide and may already exist, applied by an earlier install or by
 * hand (kubectl, another field manager): server-side apply would then refuse our `up` with a
 * field conflict. The schema is ours to define, so Pulumi takes the fields over (patchForce).
 */
export function renderCrd(): K8sObject {
  const crd = sandboxCrd() as K8sObject;
  return {
    ...crd,
    metadata: { ...crd.metadata, annotations: { ...crd.metadata.annotations, "pulumi.com/patchForce": "true" } },
  };
}

/**
 * ServiceAccounts, Roles and RoleBindings: namespaced only, each role's rules straight from
 * contract.ts (least privilege per role). The manager never leads: its Role in the runtime
 * namespace covers only the budget shares Lease (several manager replicas, one budget).
 */
export function renderRbac(namespace: string, sandboxNamespace: string): K8sObject[] {
  const out: K8sObject[] = [];
  for (const role of ["manager", "controller"] as const) {
    const name = NAMES[role];
    const rules = roleRules(role, LEASE_NAME);
    out.push({ apiVersion: "v1", kind: "ServiceAccount", metadata: { name, namespace, labels: partOf(role) } });
    out.push(...roleWithBinding(`${name}-sandboxes`, sandboxNamespace, rules.sandboxNamespace, name, namespace, role));
    if (rules.runtimeNamespace.length)
      out.push(...roleWithBinding(`${name}-runtime`, namespace, rules.runtimeNamespace, name, namespace, role));
  }
  return out;
}

function roleWithBinding(
  name: string,
  ns: string,
  rules: PolicyRule[],
  sa: string,
  saNs: string,
  role: Role,
): K8sObject[] {
  const labels = partOf(role);
  return [
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name, namespace: ns, labels },
      rules: rules.map((r) => structuredClone(r)),
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name, namespace: ns, labels },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name: sa, namespace: saNs }],
    },
  ];
}

export function renderConfigObjects<S>(input: RuntimeRenderInput<S>): K8sObject[] {
  const ns = input.namespace;
  const out: K8sObject[] = [
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: NAMES.config, namespace: ns, labels: partOf("runtime") },
      data: { "config.json": input.configJson },
    },
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: NAMES.catalog, namespace: ns, labels: partOf("runtime") },
      data: { "catalog.json": input.catalogJson },
    },
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: NAMES.tokens, namespace: ns, labels: partOf("runtime") },
      type: "Opaque",
      stringData: { "tokens.json": input.tokensJson },
    },
  ];
  if (input.registryToken)
    out.push({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: NAMES.registryToken, namespace: ns, labels: partOf("runtime") },
      type: "Opaque",
      stringData: { "key.pem": input.registryToken.keyPem, "cert.pem": input.registryToken.certPem },
    });
  if (input.delivery.kind === "bundle") {
    const b = input.delivery.bundle;
    for (const [i, part] of b.parts.entries()) {
      out.push({
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: {
          name: bundleConfigMapName(b.sha256, i),
          namespace: ns,
          labels: partOf("runtime"),
          annotations: { [ANNOTATION_RUNTIME_SHA]: b.sha256 },
        },
        immutable: true,
        binaryData: { [bundlePartKey(i)]: part },
      });
    }
  }
  return out;
}

// Over 60 lines on purpose: the Deployment literal as Kubernetes reads it; both roles' differences are inline.
export function renderDeployment<S>(input: RuntimeRenderInput<S>, role: Role): K8sObject {
  const name = NAMES[role];
  const selector = { "app.kubernetes.io/name": name };
  const d = input.delivery;
  // the API tokens only where the API is: the controller serves no authenticated route
  const api = role === "manager";
  const volumes: Record<string, unknown>[] = [
    { name: "config", configMap: { name: NAMES.config } },
    { name: "catalog", configMap: { name: NAMES.catalog } },
    ...(api ? [{ name: "tokens", secret: { secretName: NAMES.tokens, defaultMode: 0o440 } }] : []),
    { name: "tmp", emptyDir: { sizeLimit: "256Mi" } },
    ...(input.registryToken
      ? [{ name: "registry-token", secret: { secretName: NAMES.registryToken, defaultMode: 0o440 } }]
      : []),
  ];
  const mounts: Record<string, unknown>[] = [
    { name: "config", mountPath: PATHS.configDir, readOnly: true },
    { name: "catalog", mountPath: PATHS.catalogDir, readOnly: true },
    ...(api ? [{ name: "tokens", mountPath: PATHS.tokensDir, readOnly: true }] : []),
    { name: "tmp", mountPath: "/tmp" },
    ...(input.registryToken ? [{ name: "registry-token", mountPath: PATHS.registryTokenDir, readOnly: true }] : []),
  ];
  const env: Record<string, unknown>[] = [
    { name: "SBX_ROLE", value: role },
    { name: "SBX_CONFIG", value: PATHS.config },
    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
    { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
    { name: "NODE_ENV", value: "production" },
    ...Object.entries({ ...RUNTIME_PROCESS_ENV, ...runtimeHeapEnv(input.resources.memory) }).map(([name, value]) => ({
      name,
      value,
    })),
  ];
  const security = restrictedContainerSecurity();
  const resources = {
    requests: { cpu: input.resources.cpu, memory: input.resources.memory },
    limits: { memory: input.resources.memory },
  };
  const initContainers: Record<string, unknown>[] = [];
  let image: string;
  let command: string[] | undefined;
  const annotations: Record<string, unknown> = { [ANNOTATION_CONFIG_SHA]: input.configSha };
  if (d.kind === "bundle") {
    image = d.nodeImage;
    annotations[ANNOTATION_RUNTIME_SHA] = d.bundle.sha256;
    volumes.push(
      {
        name: "bundle",
        projected: {
          sources: d.bundle.parts.map((_, i) => ({ configMap: { name: bundleConfigMapName(d.bundle.sha256, i) } })),
        },
      },
      { name: "runtime", emptyDir: { sizeLimit: "64Mi" } },
    );
    mounts.push({ name: "runtime", mountPath: RUNTIME_DIR, readOnly: true });
    // join the ConfigMaps' parts and gunzip them into an emptyDir once per pod; the main
    // container mounts it read-only. A missing part fails here, loudly, not as broken code later.
    initContainers.push({
      name: "unpack",
      image,
      command: ["node", "-e", unpackScript(d.bundle.parts.length)],
      volumeMounts: [
        { name: "bundle", mountPath: "/bundle", readOnly: true },
        { name: "runtime", mountPath: RUNTIME_DIR },
      ],
      resources: { requests: { cpu: "50m", memory: "64Mi" }, limits: { memory: "128Mi" } },
      securityContext: security,
    });
    command = ["node", `${RUNTIME_DIR}/${BUNDLE_FILE}`, role];
  } else {
    image = d.image;
  }
  const container: Record<string, unknown> = {
    name: role,
    image,
    ...(command ? { command } : { args: [role] }),
    // the root filesystem is read-only; anything the runtime writes relative to cwd lands in /tmp
    workingDir: "/tmp",
    env,
    ports: [{ name: "http", containerPort: HTTP_PORT, protocol: "TCP" }],
    volumeMounts: mounts,
    resources,
    securityContext: security,
  };
  // Both roles serve /readyz and /healthz (the controller only those and /metrics). Ready means
  // the informers have listed; a standby controller is ready too, or a rollout with
  // maxUnavailable 0 would wait forever for the replica that does not lead.
  container.readinessProbe = { httpGet: { path: "/readyz", port: "http" }, periodSeconds: 5, failureThreshold: 3 };
  container.livenessProbe = {
    httpGet: { path: "/healthz", port: "http" },
    initialDelaySeconds: 10,
    periodSeconds: 10,
    failureThreshold: 3,
  };
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name, namespace: input.namespace, labels: { ...partOf(role), ...selector } },
    spec: {
      replicas: role === "manager" ? input.managerReplicas : input.controllerReplicas,
      selector: { matchLabels: selector },
      strategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      template: {
        metadata: { labels: { ...partOf(role), ...selector }, annotations },
        spec: {
          serviceAccountName: name,
          securityContext: restrictedPodSecurity(),
          ...(input.nodeSelector ? { nodeSelector: { ...input.nodeSelector } } : {}),
          topologySpreadConstraints: [
            {
              maxSkew: 1,
              topologyKey: "kubernetes.io/hostname",
              whenUnsatisfiable: "ScheduleAnyway",
              labelSelector: { matchLabels: selector },
            },
          ],
          terminationGracePeriodSeconds: 30,
          ...(initContainers.length ? { initContainers } : {}),
          containers: [container],
          volumes,
        },
      },
    },
  };
}

export function renderService(namespace: string): K8sObject {
  const selector = { "app.kubernetes.io/name": NAMES.manager };
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: NAMES.manager, namespace, labels: partOf("manager") },
    spec: { type: "ClusterIP", selector, ports: [{ name: "http", port: 80, targetPort: "http", protocol: "TCP" }] },
  };
}

/** One voluntary disruption at a time; never 0 available when there are 2+ replicas. */
export function renderPdb(namespace: string, role: Role, replicas: number): K8sObject {
  const name = NAMES[role];
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { name, namespace, labels: partOf(role) },
    spec: {
      ...(replicas > 1 ? { minAvailable: 1 } : { maxUnavailable: 1 }),
      selector: { matchLabels: { "app.kubernetes.io/name": name } },
    },
  };
}

/** Everything, in apply order. The dry-run test sends exactly this list. */
export function renderRuntime<S>(input: RuntimeRenderInput<S>): K8sObject[] {
  return [
    renderNamespace(input.namespace),
    renderCrd(),
    ...renderRbac(input.namespace, input.sandboxNamespace),
    ...renderConfigObjects(input),
    renderDeployment(input, "manager"),
    renderDeployment(input, "controller"),
    renderService(input.namespace),
    renderPdb(input.namespace, "manager", input.managerReplicas),
    renderPdb(input.namespace, "controller", input.controllerReplicas),
  ];
}

/** The init container's script: parts in key order, joined, gunzipped to the runtime dir. */
function unpackScript(parts: number): string {
  const keys = JSON.stringify(Array.from({ length: parts }, (_, i) => bundlePartKey(i)));
  return [
    'const fs = require("fs");',
    `const parts = ${keys}.map((k) => fs.readFileSync("/bundle/" + k));`,
    `fs.writeFileSync("${RUNTIME_DIR}/${BUNDLE_FILE}", require("zlib").gunzipSync(Buffer.concat(parts)));`,
  ].join(" ");
}
