// The Sandbox custom resource: the durable record of a sandbox. The pod is only compute;
// everything needed to rebuild the pod (or, later, resume from a snapshot) lives here, so a
// reconciler that starts from nothing but this record converges. Pure: shapes and mappings.
import type { AutoPauseStatus } from "../autopause/controller.ts";
import { ValidationError } from "../core/errors.ts";
import type { AutoPauseDocument, SandboxPhase, SandboxSpec, SizeClass } from "../core/types.ts";
import { ANNOTATIONS, API_GROUP, API_VERSION, LABELS, ownerLabelValue, SANDBOX_KIND } from "./contract.ts";

export interface SandboxResourceSpec {
  owner: string;
  profile: string;
  size: string;
  image: string;
  ttlSeconds: number;
  idleTimeoutSeconds: number;
  clientKey?: string;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  desiredState: "Running" | "Paused";
  /** the claimed warm pod; absent for a cold sandbox, whose pod is named after it */
  podName?: string;
  createdAt: string;
  resources: Omit<SizeClass, "name">;
  /** the automatic pause/wake policy as the caller wrote it (runtime/autopause validates it) */
  autoPause?: AutoPauseDocument;
}

export interface SandboxResourceStatus {
  phase?: SandboxPhase;
  reason?: string;
  message?: string;
  podName?: string;
  node?: string;
  readyAt?: string;
  exitCode?: number;
  finishedAt?: string;
  warm?: boolean;
  credentialsExpiresAt?: string;
  /** written by pause: where the sandbox's files went (runtime/k8s/snapshotRecords.ts) */
  snapshot?: { ref: string; digest?: string; sizeBytes?: number; createdAt?: string };
  /** automatic pause/wake status (runtime/k8s/autoPauseStatus.ts) and its top-level mirrors */
  autoPause?: AutoPauseStatus;
  probes?: AutoPauseStatus["probes"];
  nextPauseTime?: string;
  nextResumeTime?: string;
}

export interface SandboxResource {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string | Date;
    deletionTimestamp?: string | Date;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: SandboxResourceSpec;
  status?: SandboxResourceStatus;
}

// A pod name is a DNS label (63) and warm pods have no such limit issue; sandbox ids become
// both the resource name and the cold pod's name, so they must be DNS labels.
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export function validateSandboxId(id: string): void {
  if (!DNS_LABEL.test(id)) {
    throw new ValidationError(
      "sandbox id",
      id,
      "use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    );
  }
}

/** The record the manager writes when it accepts a create. */
export function buildSandboxResource(
  spec: SandboxSpec,
  namespace: string,
  opts: { podName?: string } = {},
): SandboxResource {
  validateSandboxId(spec.id);
  const { name: _name, ...resources } = spec.size;
  const labels: Record<string, string> = {
    [LABELS.managed]: "true",
    [LABELS.sandbox]: spec.id,
    [LABELS.owner]: ownerLabelValue(spec.owner),
    [LABELS.profile]: labelSafe(spec.image.profile),
    [LABELS.size]: labelSafe(spec.size.name),
  };
  const annotations: Record<string, string> = { [ANNOTATIONS.owner]: spec.owner };
  if (spec.clientKey) annotations[ANNOTATIONS.clientKey] = spec.clientKey;
  return {
    apiVersion: `${API_GROUP}/${API_VERSION}`,
    kind: SANDBOX_KIND,
    metadata: { name: spec.id, namespace, labels, annotations },
    spec: {
      owner: spec.owner,
      profile: spec.image.profile,
      size: spec.size.name,
      image: spec.image.image,
      ttlSeconds: spec.ttlSeconds,
      idleTimeoutSeconds: spec.idleTimeoutSeconds,
      ...(spec.clientKey ? { clientKey: spec.clientKey } : {}),
      env: { ...spec.env },
      metadata: { ...spec.metadata },
      desiredState: "Running",
      ...(opts.podName ? { podName: opts.podName } : {}),
      createdAt: spec.createdAt.toISOString(),
      resources,
      ...(spec.autoPause ? { autoPause: spec.autoPause } : {}),
    },
  };
}

/** The inverse: what the reconciler plans the pod from. */
export function specFromResource(cr: SandboxResource): SandboxSpec {
  const s = cr.spec;
  return {
    id: cr.metadata.name,
    owner: s.owner,
    image: { profile: s.profile, image: s.image },
    size: { name: s.size, ...s.resources },
    env: { ...(s.env ?? {}) },
    ttlSeconds: s.ttlSeconds,
    idleTimeoutSeconds: s.idleTimeoutSeconds,
    ...(s.clientKey ? { clientKey: s.clientKey } : {}),
    metadata: { ...(s.metadata ?? {}) },
    createdAt: new Date(s.createdAt),
    ...(s.autoPause ? { autoPause: s.autoPause } : {}),
  };
}

/** The pod that carries this sandbox's compute. */
export function podNameOf(cr: SandboxResource): string {
  return cr.spec.podName ?? cr.metadata.name;
}

/** The warm pool a pod or a request belongs to, from its (label-safe) profile and size. */
export function poolKey(profile: string, size: string): string {
  return `${profile}/${size}`;
}

/** Label values: <=63 chars of [A-Za-z0-9._-], alphanumeric at both ends. */
export function labelSafe(value: string): string {
  const cleaned = value
    .replace(/[^A-Za-z0-9._-]/g, "-")
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");
  return cleaned || "x";
}
