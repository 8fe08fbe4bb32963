// Plain Kubernetes object shapes the pure render modules return. Components turn them into
// @pulumi/kubernetes resources; tests and the server-side dry-run read them directly.
export interface ObjectMeta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** Labels every object sbx ships carries, so `kubectl get -l` finds them all. */
export function partOf(component: string): Record<string, string> {
  return {
    "app.kubernetes.io/part-of": "sbx",
    "app.kubernetes.io/component": component,
    "app.kubernetes.io/managed-by": "pulumi",
  };
}

/** The container securityContext that PSA `restricted` demands, plus a read-only root. */
export function restrictedContainerSecurity(uid = 1000): Record<string, unknown> {
  return {
    runAsNonRoot: true,
    runAsUser: uid,
    runAsGroup: uid,
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ["ALL"] },
    seccompProfile: { type: "RuntimeDefault" },
  };
}

export function restrictedPodSecurity(uid = 1000): Record<string, unknown> {
  return {
    runAsNonRoot: true,
    runAsUser: uid,
    runAsGroup: uid,
    fsGroup: uid,
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/** The in-cluster layer registry's names (components/layerRegistry), shared with the stack schema's egress rule. */
export const LAYER_REGISTRY = {
  name: "sbx-layer-registry",
  port: 5000,
  repository: "sbx-snapshots",
  configDir: "/etc/sbx-layer-registry",
  dataDir: "/var/lib/registry",
} as const;

export const LAYER_REGISTRY_LABELS = { "app.kubernetes.io/name": LAYER_REGISTRY.name } as const;

/** The registry's name as the runtime config gives it (snapshots.registry with inCluster). */
export function layerRegistryUrl(namespace: string): string {
  return `http://${LAYER_REGISTRY.name}.${namespace}.svc:${LAYER_REGISTRY.port}`;
}
