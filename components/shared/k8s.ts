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
