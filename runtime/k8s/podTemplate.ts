// The hardened sandbox pod, as a pure function of the sandbox spec and the runtime config.
// Every hardening choice is here and table-tested; the backend and the warm pool only send it.
import type { V1Pod } from "@kubernetes/client-node";
import type { RuntimeConfig } from "../config/schema.ts";
import { formatCpu, formatMemory } from "../core/quantity.ts";
import type { SandboxSpec, SizeClass } from "../core/types.ts";
import {
  ANNOTATIONS,
  LABELS,
  ownerLabelValue,
  POOL,
  SANDBOX_CONTAINER,
  SANDBOX_NODE_LABEL,
  SANDBOX_NODE_TAINT,
} from "./contract.ts";
import { labelSafe } from "./resource.ts";

/** The unprivileged identity every sandbox runs as. */
export const SANDBOX_UID = 1000;
export const WORKSPACE_DIR = "/workspace";
export const TMP_DIR = "/tmp";
/**
 * A pod idles as `sleep infinity` (after one log line, so the sandbox's log shows when it
 * started); all work arrives through exec. `sleep` exits on SIGTERM, so deletes finish
 * without waiting out the grace period.
 */
export const IDLE_COMMAND = ["sh", "-c", 'echo "sbx: sandbox started"; exec sleep infinity'];

/**
 * Grace for deleting a sandbox pod. Not 0: a force delete removes the API object at once
 * while the node may still run the container (and the quota frees before the resources do).
 * The idle process exits on SIGTERM, so one second is plenty.
 */
export const POD_DELETE_GRACE_SECONDS = 1;

/** The part of the runtime config a pod is planned from (userNamespaces may be left out: off). */
type PodConfig = {
  kubernetes: Pick<RuntimeConfig["kubernetes"], "namespace" | "runtimeClassName"> &
    Partial<Pick<RuntimeConfig["kubernetes"], "userNamespaces">>;
};

/** The pod for a cold-started sandbox: named after the sandbox, labelled with its owner. */
export function planSandboxPod(spec: SandboxSpec, config: PodConfig, now: Date = spec.createdAt): V1Pod {
  const labels = {
    [LABELS.managed]: "true",
    [LABELS.sandbox]: spec.id,
    [LABELS.owner]: ownerLabelValue(spec.owner),
    [LABELS.profile]: labelSafe(spec.image.profile),
    [LABELS.size]: labelSafe(spec.size.name),
  };
  const expiresAt = new Date(spec.createdAt.getTime() + spec.ttlSeconds * 1000).toISOString();
  return hardenedPod({
    name: spec.id,
    namespace: config.kubernetes.namespace,
    labels,
    annotations: { [ANNOTATIONS.owner]: spec.owner, [ANNOTATIONS.expiresAt]: expiresAt },
    image: spec.image.image,
    size: spec.size,
    // a resumed sandbox keeps its original expiry, so the deadline counts what is left of the TTL
    activeDeadlineSeconds: remainingTtlSeconds(spec, now),
    runtimeClassName: config.kubernetes.runtimeClassName,
    userNamespaces: config.kubernetes.userNamespaces,
  });
}

/** Seconds from `now` until the sandbox's hard expiry (createdAt + ttl), at least 1. */
export function remainingTtlSeconds(spec: Pick<SandboxSpec, "createdAt" | "ttlSeconds">, now: Date): number {
  return Math.max(1, Math.ceil((spec.createdAt.getTime() + spec.ttlSeconds * 1000 - now.getTime()) / 1000));
}

export interface WarmPodInput {
  profile: string;
  image: string;
  size: SizeClass;
  /** random suffix; the caller owns randomness so this stays pure */
  suffix: string;
  /**
   * Deadline for the unclaimed pod. It can only be lowered later, so it must cover the
   * longest time a pod may wait in the pool plus the longest TTL; the claim lowers it to
   * the sandbox's own TTL.
   */
  activeDeadlineSeconds: number;
}

/** A generic pod waiting in the warm pool: no owner, no sandbox, no credentials. */
export function planWarmPod(input: WarmPodInput, config: PodConfig): V1Pod {
  const profile = labelSafe(input.profile);
  const size = labelSafe(input.size.name);
  return hardenedPod({
    name: warmPodName(input.profile, input.size.name, input.suffix),
    namespace: config.kubernetes.namespace,
    labels: { [LABELS.managed]: "true", [LABELS.pool]: POOL.warm, [LABELS.profile]: profile, [LABELS.size]: size },
    annotations: {},
    image: input.image,
    size: input.size,
    activeDeadlineSeconds: input.activeDeadlineSeconds,
    runtimeClassName: config.kubernetes.runtimeClassName,
    userNamespaces: config.kubernetes.userNamespaces,
  });
}

export function warmPodName(profile: string, size: string, suffix: string): string {
  const stem = `warm-${profile}-${size}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "-")
    .replace(/-+/g, "-");
  return `${stem.slice(0, 62 - suffix.length)}-${suffix}`;
}

interface HardenedPodInput {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  image: string;
  size: SizeClass;
  activeDeadlineSeconds: number;
  runtimeClassName?: string;
  /** `hostUsers: false`; unset means the node's user namespace, the Kubernetes default */
  userNamespaces?: boolean;
}

// Over 60 lines on purpose: the pod object literal as the kubelet reads it; every hardening field sits in one place.
function hardenedPod(p: HardenedPodInput): V1Pod {
  const { size } = p;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: p.name, namespace: p.namespace, labels: p.labels, annotations: p.annotations },
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      activeDeadlineSeconds: p.activeDeadlineSeconds,
      terminationGracePeriodSeconds: 2,
      ...(p.runtimeClassName ? { runtimeClassName: p.runtimeClassName } : {}),
      // uid 1000 inside maps to an unprivileged per-pod range on the node. The pod has only
      // emptyDir volumes, a type user-namespaced pods may use (the node idmap-mounts them)
      ...(p.userNamespaces ? { hostUsers: false } : {}),
      nodeSelector: { [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value },
      tolerations: [
        {
          key: SANDBOX_NODE_TAINT.key,
          operator: "Equal",
          value: SANDBOX_NODE_TAINT.value,
          effect: SANDBOX_NODE_TAINT.effect,
        },
      ],
      securityContext: {
        runAsNonRoot: true,
        runAsUser: SANDBOX_UID,
        runAsGroup: SANDBOX_UID,
        fsGroup: SANDBOX_UID,
        seccompProfile: { type: "RuntimeDefault" },
      },
      containers: [
        {
          name: SANDBOX_CONTAINER,
          image: p.image,
          imagePullPolicy: "IfNotPresent",
          command: IDLE_COMMAND,
          workingDir: WORKSPACE_DIR,
          env: [{ name: "HOME", value: WORKSPACE_DIR }],
          resources: {
            requests: { cpu: formatCpu(size.cpuRequestMillis), memory: formatMemory(size.memoryRequestBytes) },
            limits: { cpu: formatCpu(size.cpuLimitMillis), memory: formatMemory(size.memoryLimitBytes) },
          },
          securityContext: {
            allowPrivilegeEscalation: false,
            privileged: false,
            readOnlyRootFilesystem: true,
            runAsNonRoot: true,
            capabilities: { drop: ["ALL"] },
          },
          volumeMounts: [
            { name: "workspace", mountPath: WORKSPACE_DIR },
            { name: "tmp", mountPath: TMP_DIR },
          ],
        },
      ],
      volumes: [
        { name: "workspace", emptyDir: { sizeLimit: formatMemory(size.workspaceBytes) } },
        { name: "tmp", emptyDir: { sizeLimit: formatMemory(size.tmpBytes) } },
      ],
    },
  };
}
