// Status truth: what a sandbox really is, from its record and its pod. Pure.
// The pod phase alone lies: a container OOM-killed or exited non-zero leaves the phase at
// Running for a while (and forever on some kubelets), so container states decide first.
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import type { Sandbox, SandboxPhase } from "../core/types.ts";
import { ANNOTATIONS, SANDBOX_CONTAINER } from "./contract.ts";
import type { SandboxResource, SandboxResourceStatus } from "./resource.ts";

/** What the pod says, reduced to the fields a sandbox status needs. */
export interface ObservedPod {
  phase: SandboxPhase;
  ready: boolean;
  reason?: string;
  message?: string;
  exitCode?: number;
  node?: string;
  finishedAt?: string;
  readyAt?: string;
}

// Waiting reasons that will never resolve on their own: retrying does not fix a bad image
// name or a broken container config, so the sandbox fails instead of sitting Pending.
const PERMANENT_WAITING = new Set([
  "InvalidImageName",
  "CreateContainerConfigError",
  "CreateContainerError",
  "ErrImageNeverPull",
]);

// Over 60 lines on purpose: one decision cascade (container state before pod phase), read top to bottom; table-
// tested.
export function observePod(pod: V1Pod): ObservedPod {
  const node = pod.spec?.nodeName || undefined;
  const cs = containerStatus(pod);
  const terminated = cs?.state?.terminated;
  if (terminated) {
    const finishedAt = iso(terminated.finishedAt);
    if (terminated.exitCode === 0 && terminated.reason !== "OOMKilled") {
      return {
        phase: "Succeeded",
        ready: false,
        reason: terminated.reason || "Completed",
        exitCode: 0,
        node,
        finishedAt,
      };
    }
    const reason = terminated.reason || "Error";
    return {
      phase: "Failed",
      ready: false,
      reason,
      message: terminated.message || `container exited with code ${terminated.exitCode}`,
      exitCode: terminated.exitCode,
      node,
      finishedAt,
    };
  }
  if (pod.metadata?.deletionTimestamp) return { phase: "Terminating", ready: false, node };
  const podPhase = pod.status?.phase;
  if (podPhase === "Failed") {
    return {
      phase: "Failed",
      ready: false,
      reason: pod.status?.reason || "Failed",
      message: pod.status?.message,
      node,
      finishedAt: lastTransition(pod),
    };
  }
  if (podPhase === "Succeeded")
    return {
      phase: "Succeeded",
      ready: false,
      reason: "Completed",
      exitCode: 0,
      node,
      finishedAt: lastTransition(pod),
    };
  const waiting = cs?.state?.waiting;
  if (waiting?.reason && PERMANENT_WAITING.has(waiting.reason)) {
    return { phase: "Failed", ready: false, reason: waiting.reason, message: waiting.message, node };
  }
  const readyCond = pod.status?.conditions?.find((c) => c.type === "Ready");
  const running = !!cs?.state?.running;
  if (podPhase === "Running") {
    const ready = running && readyCond?.status === "True";
    return {
      phase: "Running",
      ready,
      node,
      ...(ready ? { readyAt: iso(readyCond?.lastTransitionTime) ?? iso(cs?.state?.running?.startedAt) } : {}),
    };
  }
  const unschedulable = pod.status?.conditions?.find((c) => c.type === "PodScheduled" && c.status === "False");
  if (unschedulable)
    return {
      phase: "Pending",
      ready: false,
      reason: unschedulable.reason || "Unschedulable",
      message: unschedulable.message,
      node,
    };
  if (waiting?.reason)
    return { phase: "Pending", ready: false, reason: waiting.reason, message: waiting.message, node };
  return { phase: "Pending", ready: false, node };
}

export interface DeriveOptions {
  /** the credential broker is on: a sandbox is ready only once its credentials are inside */
  credentialsRequired: boolean;
}

/**
 * The sandbox as callers see it. A terminal status recorded on the resource wins over
 * everything (the pod may be gone by now); otherwise the live pod decides.
 */
export function deriveSandbox(cr: SandboxResource, pod: V1Pod | undefined, opts: DeriveOptions): Sandbox {
  const s = cr.spec;
  const recorded = cr.status ?? {};
  const createdAt = s.createdAt;
  const expiresAt = new Date(new Date(createdAt).getTime() + s.ttlSeconds * 1000).toISOString();
  const base: Sandbox = {
    id: cr.metadata.name,
    owner: s.owner,
    profile: s.profile,
    size: s.size,
    phase: "Pending",
    ready: false,
    createdAt,
    expiresAt,
    metadata: { ...(s.metadata ?? {}) },
    cpuRequestMillis: s.resources.cpuRequestMillis,
    memoryRequestBytes: s.resources.memoryRequestBytes,
    idleTimeoutSeconds: s.idleTimeoutSeconds,
    warm: !!s.podName,
    ...(s.clientKey ? { clientKey: s.clientKey } : {}),
    ...(s.autoPause ? { autoPause: s.autoPause } : {}),
  };
  const lastActivity = cr.metadata.annotations?.[ANNOTATIONS.lastActivity];
  if (lastActivity) base.lastActivityAt = lastActivity;
  if (cr.metadata.deletionTimestamp)
    return { ...base, ...recordedFields(recorded), phase: "Terminating", ready: false };
  if (recorded.phase === "Failed" || recorded.phase === "Succeeded")
    return { ...base, ...recordedFields(recorded), phase: recorded.phase, ready: false };
  // Paused: the pod is gone on purpose (pause/resume); the Sandbox object keeps the identity.
  if (s.desiredState === "Paused" && !pod)
    return { ...base, ...recordedFields(recorded), phase: "Paused", ready: false };
  if (recorded.phase === "Paused" || recorded.phase === "Pausing" || recorded.phase === "Resuming") {
    if (!pod) return { ...base, ...recordedFields(recorded), phase: recorded.phase, ready: false };
  }
  if (!pod)
    return { ...base, ...recordedFields(recorded), phase: recorded.podName ? "Terminating" : "Pending", ready: false };
  const o = observePod(pod);
  const credsIn = !opts.credentialsRequired || !!credentialsExpiry(cr);
  const ready = o.ready && credsIn;
  const out: Sandbox = { ...base, phase: o.phase, ready };
  if (o.reason) out.reason = o.reason;
  else if (o.ready && !credsIn) out.reason = "DeliveringCredentials";
  if (o.message) out.message = o.message;
  if (o.exitCode !== undefined) out.exitCode = o.exitCode;
  if (o.node) out.node = o.node;
  if (ready) out.readyAt = recorded.readyAt ?? o.readyAt;
  if (o.finishedAt) out.finishedAt = o.finishedAt;
  else if (o.phase === "Failed" || o.phase === "Succeeded") out.finishedAt = recorded.finishedAt;
  return out;
}

/** The status the reconciler persists on the record, from the derived sandbox. */
export function planRecordedStatus(
  prev: SandboxResourceStatus | undefined,
  sb: Sandbox,
  podName: string | undefined,
  now: Date,
): SandboxResourceStatus {
  const next: SandboxResourceStatus = { ...(prev ?? {}) };
  next.phase = sb.phase === "Terminating" ? (prev?.phase ?? "Pending") : sb.phase;
  setOrDelete(next, "reason", sb.reason);
  setOrDelete(next, "message", sb.message);
  setOrDelete(next, "exitCode", sb.exitCode);
  if (podName) next.podName = podName;
  if (sb.node) next.node = sb.node;
  if (sb.ready && !next.readyAt) next.readyAt = sb.readyAt ?? now.toISOString();
  if ((sb.phase === "Failed" || sb.phase === "Succeeded") && !next.finishedAt)
    next.finishedAt = sb.finishedAt ?? now.toISOString();
  if (sb.warm) next.warm = true;
  return next;
}

/** when the credentials inside expire: the reconciler records it in status, a warm claim in an annotation */
export function credentialsExpiry(cr: SandboxResource): string | undefined {
  return cr.status?.credentialsExpiresAt ?? cr.metadata.annotations?.[ANNOTATIONS.credentialsExpiresAt];
}

function recordedFields(r: SandboxResourceStatus): Partial<Sandbox> {
  const out: Partial<Sandbox> = {};
  if (r.reason) out.reason = r.reason;
  if (r.message) out.message = r.message;
  if (r.exitCode !== undefined) out.exitCode = r.exitCode;
  if (r.node) out.node = r.node;
  if (r.readyAt) out.readyAt = r.readyAt;
  if (r.finishedAt) out.finishedAt = r.finishedAt;
  return out;
}

function setOrDelete<K extends keyof SandboxResourceStatus>(
  o: SandboxResourceStatus,
  k: K,
  v: SandboxResourceStatus[K] | undefined,
): void {
  if (v === undefined) delete o[k];
  else o[k] = v;
}

function containerStatus(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER);
}

function lastTransition(pod: V1Pod): string | undefined {
  const times = (pod.status?.conditions ?? []).map((c) => iso(c.lastTransitionTime)).filter((t): t is string => !!t);
  return times.sort().at(-1);
}

function iso(t: Date | string | undefined): string | undefined {
  if (!t) return undefined;
  return typeof t === "string" ? t : t.toISOString();
}
