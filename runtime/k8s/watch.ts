// The two shared informers every replica runs (managed pods, Sandbox objects), feeding the
// SandboxIndex that describe, list, readiness and the controller read.
import type { KubernetesObject, V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { KubeClients } from "./client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_PLURAL } from "./contract.ts";
import { type SupervisedInformer, startSupervisedInformer, trimForCache } from "./informer.ts";
import type { SandboxResource } from "./resource.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

export interface WatchOptions {
  clients: Pick<KubeClients, "kc" | "core" | "custom">;
  namespace: string;
  index: SandboxIndex;
  clock: Clock;
  logger: Logger;
  /** a Sandbox object was deleted (forget what is kept about it) */
  onSandboxGone(id: string): void;
}

/** Starts both informers and resolves once both have synced. */
export async function startSandboxWatch(o: WatchOptions): Promise<SupervisedInformer<unknown>[]> {
  const { namespace: ns, index, clock, logger } = o;
  const { kc, core, custom } = o.clients;
  const pods = startSupervisedInformer<V1Pod>({
    name: "pods",
    kc,
    path: `/api/v1/namespaces/${ns}/pods`,
    labelSelector: `${LABELS.managed}=true`,
    list: () => core.listNamespacedPod({ namespace: ns, labelSelector: `${LABELS.managed}=true` }),
    clock,
    logger,
    transform: trimForCache,
    onAdd: (p) => index.watched.upsertPod(p),
    onUpdate: (p) => index.watched.upsertPod(p),
    onDelete: (p) => index.watched.deletePod(p),
  });
  // Custom objects arrive as plain JSON (timestamps are strings), hence the casts.
  const records = startSupervisedInformer<KubernetesObject>({
    name: "sandboxes",
    kc,
    path: `/apis/${API_GROUP}/${API_VERSION}/namespaces/${ns}/${SANDBOX_PLURAL}`,
    list: () =>
      custom.listNamespacedCustomObject({
        group: API_GROUP,
        version: API_VERSION,
        namespace: ns,
        plural: SANDBOX_PLURAL,
      }),
    clock,
    logger,
    transform: trimForCache,
    onAdd: (cr) => index.watched.upsertResource(cr as unknown as SandboxResource),
    onUpdate: (cr) => index.watched.upsertResource(cr as unknown as SandboxResource),
    onDelete: (cr) => {
      o.onSandboxGone(cr.metadata!.name!);
      index.watched.deleteResource(cr.metadata!.name!);
    },
  });
  const all = [pods, records] as SupervisedInformer<unknown>[];
  await Promise.all([pods.synced(30_000), records.synced(30_000)]);
  return all;
}
