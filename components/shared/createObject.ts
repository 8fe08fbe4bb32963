// Turns a rendered K8sObject into the matching typed @pulumi/kubernetes resource, so the
// objects tests and the dry-run inspect are exactly what gets deployed.
import * as k8s from "@pulumi/kubernetes";
import type * as pulumi from "@pulumi/pulumi";
import type { K8sObject } from "./k8s.ts";

// biome-ignore lint/suspicious/noExplicitAny: each constructor takes its own Args type; one table of them needs a parameter all accept, and the rendered object is passed as is
type Ctor = new (name: string, args: any, opts?: pulumi.CustomResourceOptions) => pulumi.CustomResource;

const CTORS: Record<string, Ctor> = {
  "v1/Namespace": k8s.core.v1.Namespace,
  "v1/ServiceAccount": k8s.core.v1.ServiceAccount,
  "v1/ConfigMap": k8s.core.v1.ConfigMap,
  "v1/Secret": k8s.core.v1.Secret,
  "v1/Service": k8s.core.v1.Service,
  "v1/PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
  "v1/ResourceQuota": k8s.core.v1.ResourceQuota,
  "v1/LimitRange": k8s.core.v1.LimitRange,
  "apps/v1/Deployment": k8s.apps.v1.Deployment,
  "apps/v1/DaemonSet": k8s.apps.v1.DaemonSet,
  "policy/v1/PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
  "networking.k8s.io/v1/NetworkPolicy": k8s.networking.v1.NetworkPolicy,
  "rbac.authorization.k8s.io/v1/Role": k8s.rbac.v1.Role,
  "rbac.authorization.k8s.io/v1/RoleBinding": k8s.rbac.v1.RoleBinding,
  "apiextensions.k8s.io/v1/CustomResourceDefinition": k8s.apiextensions.v1.CustomResourceDefinition,
};

/** Logical name: `<component>-<kind>-<name>`; stable as long as the object's name is. */
export function logicalName(component: string, obj: K8sObject): string {
  return `${component}-${obj.kind.toLowerCase()}-${obj.metadata.name}`;
}

export function createObject(
  component: string,
  obj: K8sObject,
  opts: pulumi.CustomResourceOptions,
): pulumi.CustomResource {
  const Ctor = CTORS[`${obj.apiVersion}/${obj.kind}`];
  if (!Ctor) throw new Error(`createObject: no resource type for ${obj.apiVersion} ${obj.kind}; add it to CTORS`);
  return new Ctor(logicalName(component, obj), obj, opts);
}
