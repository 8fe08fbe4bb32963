// Reconcile one sandbox: get -> gone is done -> deletion -> pure plan -> apply -> status
// written only if it changed. Reads come from the informer cache; the one live read is the
// confirmation that a pod is really gone before a sandbox is declared gone.
import type { CoreV1Api, CustomObjectsApi, V1Pod } from "@kubernetes/client-node";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { apiMessage, isNotFound, mergePatch, statusCode } from "../k8s/client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_KIND, SANDBOX_PLURAL } from "../k8s/contract.ts";
import { POD_DELETE_GRACE_SECONDS, planSandboxPod } from "../k8s/podTemplate.ts";
import { podNameOf, type SandboxResource, type SandboxResourceStatus, specFromResource } from "../k8s/resource.ts";
import type { SandboxIndex } from "../k8s/sandboxIndex.ts";
import { deriveSandbox } from "../k8s/status.ts";
import { planOrphans, planSandbox, type SandboxAction, type SandboxPlan } from "./sandboxPlan.ts";
import type { ReconcileResult } from "./workqueue.ts";

export interface SandboxReconcilerOptions {
  index: SandboxIndex;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  config: Pick<RuntimeConfig, "kubernetes">;
  clock: Clock;
  logger: Logger;
  /** mints and writes credentials into the pod; returns their expiry. Absent when the broker is off. */
  deliverCredentials?: (id: string, podName: string) => Promise<Date>;
  credentialsRefreshMarginMs?: number;
  orphanGraceMs?: number;
}

export class SandboxReconciler {
  constructor(private readonly o: SandboxReconcilerOptions) {}

  async reconcile(id: string): Promise<ReconcileResult> {
    const cr = this.o.index.resource(id);
    if (!cr) return this.reconcileOrphans(this.podsLabelled(id));
    // Accepted but not yet written (no uid): its write completion enqueues it again.
    if (!cr.metadata.uid) return;
    let podLive: "present" | "gone" | undefined;
    for (let round = 0; round < 2; round++) {
      const plan = this.plan(cr, podLive);
      const verify = plan.actions.find((a) => a.kind === "verifyPodGone");
      if (verify && verify.kind === "verifyPodGone") {
        podLive = await this.podExists(verify.podName);
        continue;
      }
      await this.apply(cr, plan.actions);
      return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
    }
    return { requeueAfterMs: 1_000 };
  }

  /** sweeps every pod whose sandbox record is missing (run on resync) */
  async reconcileAllOrphans(): Promise<ReconcileResult> {
    return this.reconcileOrphans(this.o.index.podsWithoutRecord());
  }

  private plan(cr: SandboxResource, podLive: "present" | "gone" | undefined): SandboxPlan {
    const pod = this.o.index.podOf(cr.metadata.name);
    const expected = podNameOf(cr);
    const strayPods = this.podsLabelled(cr.metadata.name).filter((p) => p.metadata?.name !== expected);
    return planSandbox({
      cr,
      pod,
      podLive,
      strayPods,
      derived: deriveSandbox(cr, pod, { credentialsRequired: !!this.o.deliverCredentials }),
      now: this.o.clock.now(),
      credentials: {
        enabled: !!this.o.deliverCredentials,
        refreshMarginMs: this.o.credentialsRefreshMarginMs ?? 5 * 60_000,
      },
    });
  }

  private async reconcileOrphans(pods: V1Pod[]): Promise<ReconcileResult> {
    const plan = planOrphans({ pods, now: this.o.clock.now(), graceMs: this.o.orphanGraceMs ?? 30_000 });
    for (const a of plan.actions) if (a.kind === "deletePod") await this.deletePod(a.podName, a.why);
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
  }

  private async apply(cr: SandboxResource, actions: SandboxAction[]): Promise<void> {
    const errors: string[] = [];
    for (const a of actions) {
      try {
        await this.applyOne(cr, a);
      } catch (err) {
        errors.push(`${a.kind}: ${apiMessage(err)}`);
      }
    }
    if (errors.length) throw new Error(`sandbox ${cr.metadata.name}: ${errors.join("; ")}`);
  }

  private async applyOne(cr: SandboxResource, a: SandboxAction): Promise<void> {
    const ns = this.o.config.kubernetes.namespace;
    const id = cr.metadata.name;
    switch (a.kind) {
      case "createPod":
        return this.createPod(cr);
      case "adoptPod": {
        const patched = await this.o.core.patchNamespacedPod(
          { name: a.podName, namespace: ns, body: { metadata: { ownerReferences: [ownerRef(cr)] } } },
          mergePatch,
        );
        this.o.index.own.upsertPod(patched);
        return;
      }
      case "deletePod":
        return this.deletePod(a.podName, a.why);
      case "deleteSandbox":
        this.o.logger.info({ sandbox: id, reason: a.reason }, "sandbox gone");
        try {
          await this.o.custom.deleteNamespacedCustomObject({
            group: API_GROUP,
            version: API_VERSION,
            namespace: ns,
            plural: SANDBOX_PLURAL,
            name: id,
          });
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
        return;
      case "deliverCredentials": {
        const expires = await this.o.deliverCredentials!(id, a.podName);
        return this.writeStatus(cr, { ...(cr.status ?? {}), credentialsExpiresAt: expires.toISOString() });
      }
      case "writeStatus":
        return this.writeStatus(cr, a.status);
      case "verifyPodGone":
        return; // handled by reconcile(): it needs a second planning round
    }
  }

  private async createPod(cr: SandboxResource): Promise<void> {
    const ns = this.o.config.kubernetes.namespace;
    const body = planSandboxPod(specFromResource(cr), this.o.config, this.o.clock.now());
    body.metadata!.ownerReferences = [ownerRef(cr)];
    try {
      const pod = await this.o.core.createNamespacedPod({ namespace: ns, body });
      this.o.index.own.upsertPod(pod);
    } catch (err) {
      const code = statusCode(err);
      const msg = apiMessage(err);
      if (code === 409) {
        // Already there (an earlier round, or another leader before us): fine.
      } else if (code === 403 && /exceeded quota/i.test(msg)) {
        // The namespace ResourceQuota is the hard ceiling: the sandbox fails with the reason,
        // which releases its admission reservation, rather than retrying forever.
        return this.writeStatus(cr, {
          ...(cr.status ?? {}),
          phase: "Failed",
          reason: "QuotaExceeded",
          message: msg,
          finishedAt: this.o.clock.now().toISOString(),
        });
      } else if (code === 422 || code === 400) {
        return this.writeStatus(cr, {
          ...(cr.status ?? {}),
          phase: "Failed",
          reason: "InvalidPodSpec",
          message: msg,
          finishedAt: this.o.clock.now().toISOString(),
        });
      } else {
        throw err;
      }
    }
    // Record that the pod exists, so a later disappearance reads as "deleted", not "not yet made".
    await this.writeStatus(cr, {
      ...(cr.status ?? {}),
      phase: cr.status?.phase ?? "Pending",
      podName: body.metadata!.name,
    });
  }

  private async deletePod(name: string, why: string): Promise<void> {
    try {
      await this.o.core.deleteNamespacedPod({
        name,
        namespace: this.o.config.kubernetes.namespace,
        gracePeriodSeconds: POD_DELETE_GRACE_SECONDS,
      });
      this.o.logger.info({ pod: name, why }, "deleted pod");
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  private async podExists(name: string): Promise<"present" | "gone"> {
    try {
      const pod = await this.o.core.readNamespacedPod({ name, namespace: this.o.config.kubernetes.namespace });
      this.o.index.own.upsertPod(pod);
      return "present";
    } catch (err) {
      if (isNotFound(err)) return "gone";
      throw err;
    }
  }

  private async writeStatus(cr: SandboxResource, next: SandboxResourceStatus): Promise<void> {
    const prev = cr.status ?? {};
    const patch: Record<string, unknown> = {};
    for (const k of new Set([...Object.keys(prev), ...Object.keys(next)]) as Set<keyof SandboxResourceStatus>) {
      if (JSON.stringify(prev[k]) !== JSON.stringify(next[k])) patch[k] = next[k] === undefined ? null : next[k];
    }
    if (Object.keys(patch).length === 0) return;
    try {
      const updated = (await this.o.custom.patchNamespacedCustomObjectStatus(
        {
          group: API_GROUP,
          version: API_VERSION,
          namespace: this.o.config.kubernetes.namespace,
          plural: SANDBOX_PLURAL,
          name: cr.metadata.name,
          body: { status: patch },
        },
        mergePatch,
      )) as SandboxResource;
      this.o.index.own.upsertResource(updated);
    } catch (err) {
      if (!isNotFound(err)) throw err; // deleted meanwhile: nothing to record
    }
  }

  private podsLabelled(id: string): V1Pod[] {
    const out: V1Pod[] = [];
    const direct = this.o.index.podOf(id);
    if (direct?.metadata?.labels?.[LABELS.sandbox] === id) out.push(direct);
    for (const p of this.o.index.podsWithoutRecord())
      if (p.metadata?.labels?.[LABELS.sandbox] === id && !out.includes(p)) out.push(p);
    return out;
  }
}

function ownerRef(cr: SandboxResource) {
  return {
    apiVersion: `${API_GROUP}/${API_VERSION}`,
    kind: SANDBOX_KIND,
    name: cr.metadata.name,
    uid: cr.metadata.uid!,
    controller: true,
    blockOwnerDeletion: false,
  };
}
