// The Kubernetes side of pause/resume (docs/pause-resume.md "Backend duties"). The Sandbox
// object is the identity and outlives its pod; the pod is compute and goes while paused.
//   releaseCompute: desiredState Paused first (so the reconciler neither recreates the pod nor
//     reads its absence as "deleted"), then delete the pod and wait until it is gone, then
//     record phase Paused and forget the old pod in status.
//   adopt: forget the old pod in status first (so "no pod" reads as "make one"), then take a
//     warm pod of the same profile and size when one is ready, else let the reconciler create
//     a cold one, and flip desiredState back to Running.
// Both are idempotent and may be interrupted at any step: each step only moves towards its
// goal, and re-running from the top converges.
import type { CoreV1Api, CustomObjectsApi, V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import { UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Sandbox, SandboxSpec } from "../core/types.ts";
import { isNotFound, mergePatch, toDomainError } from "./client.ts";
import { ANNOTATIONS, API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { WarmPods } from "./control.ts";
import { POD_DELETE_GRACE_SECONDS } from "./podTemplate.ts";
import { podNameOf, type SandboxResource, type SandboxResourceStatus } from "./resource.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

export interface ComputeReleaseDeps {
  namespace: string;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  index: SandboxIndex;
  warmPool: Pick<WarmPods, "claim">;
  clock: Clock;
  logger: Logger;
  /** the Sandbox object from the cache or the API server; throws NotFoundError */
  resource(id: string): Promise<SandboxResource>;
  /** true when a warm pool is configured for spec's profile and size */
  pooled(spec: SandboxSpec): boolean;
  /** the sandbox as the index derives it */
  derived(id: string): Sandbox;
  /** how long to wait for a deleted pod to disappear */
  podGoneTimeoutMs?: number;
}

/** Status fields that describe one pod's life; cleared when the pod goes. */
const POD_STATUS_FIELDS: (keyof SandboxResourceStatus)[] = [
  "podName",
  "node",
  "readyAt",
  "reason",
  "message",
  "exitCode",
  "finishedAt",
  "warm",
  "credentialsExpiresAt",
];

/**
 * Deletes a warm pod this replica claimed for sandbox `id` but could not use. Never rejects: a
 * failure is logged with the sandbox and the pod, and the reconciler removes the pod later (a
 * second pod carrying the sandbox's label, or an orphan).
 */
export async function discardClaimedPod(
  d: Pick<ComputeReleaseDeps, "core" | "namespace" | "logger">,
  id: string,
  podName: string,
  op: string,
): Promise<void> {
  try {
    await d.core.deleteNamespacedPod({
      name: podName,
      namespace: d.namespace,
      gracePeriodSeconds: POD_DELETE_GRACE_SECONDS,
    });
  } catch (err) {
    if (isNotFound(err)) return;
    d.logger.warn(
      { sandbox: id, pod: podName, op, err: (err as Error).message ?? String(err) },
      "deleting a claimed pod that could not be used failed; the reconciler removes it later",
    );
  }
}

// Over 60 lines on purpose: release and adopt share the patch helpers and the index in this closure.
export function createComputeRelease(d: ComputeReleaseDeps) {
  const crApi = { group: API_GROUP, version: API_VERSION, namespace: d.namespace, plural: SANDBOX_PLURAL };

  const patchSpec = async (id: string, body: object): Promise<void> => {
    const updated = (await d.custom.patchNamespacedCustomObject(
      { ...crApi, name: id, body },
      mergePatch,
    )) as SandboxResource;
    d.index.own.upsertResource(updated);
  };

  const patchStatus = async (id: string, status: Record<string, unknown>): Promise<void> => {
    const updated = (await d.custom.patchNamespacedCustomObjectStatus(
      { ...crApi, name: id, body: { status } },
      mergePatch,
    )) as SandboxResource;
    d.index.own.upsertResource(updated);
  };

  const readPod = async (name: string): Promise<V1Pod | undefined> => {
    try {
      return await d.core.readNamespacedPod({ name, namespace: d.namespace });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };

  /** Deletes the pod (if any) and resolves once the API server no longer has it. */
  const deletePodAndWait = async (id: string, name: string): Promise<void> => {
    try {
      await d.core.deleteNamespacedPod({ name, namespace: d.namespace, gracePeriodSeconds: POD_DELETE_GRACE_SECONDS });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const timeoutMs = d.podGoneTimeoutMs ?? 60_000;
    const started = d.clock.now().getTime();
    // the informer usually reports the deletion first; a live read confirms it either way
    for (let wait = 25; ; wait = Math.min(wait * 2, 500)) {
      if (!d.index.pod(name) && !(await readPod(name))) return;
      if (d.clock.now().getTime() - started > timeoutMs) {
        throw new UpstreamError(
          `sandbox ${id}: its pod ${name} was deleted but still exists after ${timeoutMs} ms; the node may be unreachable. Retry the pause once the pod is gone (kubectl -n ${d.namespace} get pod ${name})`,
        );
      }
      await d.clock.sleep(wait);
    }
  };

  const clearedPodStatus = (phase: string): Record<string, unknown> => {
    const status: Record<string, unknown> = { phase };
    for (const k of POD_STATUS_FIELDS) status[k] = null;
    return status;
  };

  return {
    async releaseCompute(id: string): Promise<void> {
      try {
        const cr = await d.resource(id);
        if (cr.spec.desiredState !== "Paused") await patchSpec(id, { spec: { desiredState: "Paused" } });
        await deletePodAndWait(id, podNameOf(cr));
        await patchStatus(id, clearedPodStatus("Paused"));
        d.logger.info(
          { sandbox: id, pod: podNameOf(cr), op: "pause" },
          "compute released; the Sandbox object keeps the identity",
        );
      } catch (err) {
        throw toDomainError(err, "release sandbox compute", { kind: "sandbox", name: id });
      }
    },

    async adopt(spec: SandboxSpec): Promise<Sandbox> {
      const id = spec.id;
      try {
        const cr = await d.resource(id);
        if (cr.spec.desiredState === "Running" && d.index.podOf(id)) return d.derived(id); // already adopted
        const pod = d.pooled(spec) ? await d.warmPool.claim(spec) : undefined;
        try {
          // a cold pod is named after the sandbox: an old one of that name must be gone first
          if (!pod) await deletePodAndWait(id, id);
          await patchStatus(id, clearedPodStatus("Pending"));
          await patchSpec(id, {
            metadata: { annotations: { [ANNOTATIONS.credentialsExpiresAt]: null } },
            spec: { desiredState: "Running", podName: pod ? pod.metadata!.name! : null },
          });
        } catch (err) {
          // a claimed pod is never returned to the pool
          if (pod) await discardClaimedPod(d, id, pod.metadata!.name!, "resume");
          throw err;
        }
        d.logger.info({ sandbox: id, pod: pod?.metadata?.name ?? id, warm: !!pod, op: "resume" }, "compute adopted");
        return d.derived(id);
      } catch (err) {
        throw toDomainError(err, "give sandbox compute", { kind: "sandbox", name: id });
      }
    },
  };
}
