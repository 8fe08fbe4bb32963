// The sandbox reconciler's decisions, as a pure function of (record, observed pod, now).
// The reconciler never learns why it was called; it looks at the world and plans the next
// step, so being called twice, late, or after a crash is harmless.
import type { V1Pod } from "@kubernetes/client-node";
import type { Sandbox } from "../core/types.ts";
import { ANNOTATIONS, LABELS, POOL } from "../k8s/contract.ts";
import { podNameOf, type SandboxResource, type SandboxResourceStatus } from "../k8s/resource.ts";
import { credentialsExpiry, observePod, planRecordedStatus } from "../k8s/status.ts";

export type SandboxAction =
  | { kind: "createPod" }
  | { kind: "adoptPod"; podName: string }
  | { kind: "verifyPodGone"; podName: string }
  | { kind: "deleteSandbox"; reason: string }
  | { kind: "deletePod"; podName: string; why: string }
  | { kind: "deliverCredentials"; podName: string }
  | { kind: "writeStatus"; status: SandboxResourceStatus };

export interface SandboxPlan {
  actions: SandboxAction[];
  requeueAfterMs?: number;
}

export interface SandboxObservation {
  cr: SandboxResource;
  /** the pod as the informer cache has it */
  pod?: V1Pod;
  /** a live read, made only when the cache shows no pod for a sandbox that had one */
  podLive?: "present" | "gone";
  /** other pods carrying this sandbox's label (a lost claim race, a leftover): never kept */
  strayPods: V1Pod[];
  derived: Sandbox;
  now: Date;
  credentials: { enabled: boolean; refreshMarginMs: number };
}

export function planSandbox(o: SandboxObservation): SandboxPlan {
  const { cr, pod } = o;
  const actions: SandboxAction[] = o.strayPods.map((p) => ({
    kind: "deletePod" as const,
    podName: p.metadata!.name!,
    why: "a second pod carries this sandbox's label",
  }));
  if (cr.metadata.deletionTimestamp) return { actions };
  const podName = podNameOf(cr);
  const recorded = cr.status ?? {};
  const terminal = recorded.phase === "Failed" || recorded.phase === "Succeeded";

  if (!pod) {
    if (cr.spec.desiredState === "Paused" || recorded.phase === "Paused") return { actions };
    const hadPod = !!cr.spec.podName || !!recorded.podName;
    if (!hadPod) {
      if (terminal) return { actions }; // e.g. the quota refused its pod: stays Failed for the reaper
      return { actions: [...actions, { kind: "createPod" }] };
    }
    if (o.podLive === undefined) return { actions: [...actions, { kind: "verifyPodGone", podName }] };
    if (o.podLive === "gone")
      return { actions: [...actions, { kind: "deleteSandbox", reason: `its pod ${podName} was deleted` }] };
    return { actions, requeueAfterMs: 1_000 }; // the cache is behind the API server
  }

  if (!ownedBy(pod, cr)) actions.push({ kind: "adoptPod", podName });
  let requeueAfterMs: number | undefined;
  const observed = observePod(pod);
  if (o.credentials.enabled && observed.ready && !terminal) {
    const at = credentialsExpiry(cr);
    const expires = at ? Date.parse(at) : 0;
    const dueAt = expires - o.credentials.refreshMarginMs;
    if (dueAt <= o.now.getTime()) actions.push({ kind: "deliverCredentials", podName });
    else requeueAfterMs = dueAt - o.now.getTime();
  }
  const next = planRecordedStatus(recorded, o.derived, podName, o.now);
  // A fresh pod's Pending is not worth a write (the API server is the bottleneck under a
  // burst); the first status written is Running or terminal.
  const firstPending = next.phase === "Pending" && !recorded.phase;
  if (!firstPending && !sameStatus(recorded, next)) actions.push({ kind: "writeStatus", status: next });
  return { actions, ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}) };
}

export interface OrphanObservation {
  pods: V1Pod[];
  now: Date;
  graceMs: number;
}

/**
 * Pods labelled with a sandbox whose record does not exist. A claim writes the pod first
 * and the record second, and a fresh leader's pod list can be newer than its record list,
 * so a young orphan gets a grace period before it is deleted.
 */
export function planOrphans(o: OrphanObservation): SandboxPlan {
  const actions: SandboxAction[] = [];
  let requeueAfterMs: number | undefined;
  for (const pod of o.pods) {
    const since = orphanSince(pod);
    const age = o.now.getTime() - since;
    if (age >= o.graceMs)
      actions.push({ kind: "deletePod", podName: pod.metadata!.name!, why: "its sandbox record does not exist" });
    else requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, o.graceMs - age);
  }
  return { actions, ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}) };
}

function orphanSince(pod: V1Pod): number {
  const claimed =
    pod.metadata?.labels?.[LABELS.pool] === POOL.claimed
      ? pod.metadata?.annotations?.[ANNOTATIONS.claimedAt]
      : undefined;
  const t = claimed ?? pod.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : 0;
}

function ownedBy(pod: V1Pod, cr: SandboxResource): boolean {
  return !!cr.metadata.uid && !!pod.metadata?.ownerReferences?.some((r) => r.uid === cr.metadata.uid);
}

function sameStatus(a: SandboxResourceStatus, b: SandboxResourceStatus): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof SandboxResourceStatus>;
  for (const k of keys) if (JSON.stringify(a[k]) !== JSON.stringify(b[k])) return false;
  return true;
}
