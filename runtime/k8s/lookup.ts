// Finding a sandbox's record and its pod: from the informer cache, else from the API server
// (another replica accepted it a moment ago), and the pod a command may run in.
import { NotFoundError } from "../core/errors.ts";
import { isNotFound, toDomainError } from "./client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import { decideExecPod } from "./decideAccess.ts";
import type { KubernetesParts } from "./parts.ts";
import type { SandboxResource } from "./resource.ts";

export interface SandboxLookup {
  /** the record; with graceMs, an unknown id is looked for that long (a record still on its way) */
  resource(id: string, graceMs?: number): Promise<SandboxResource>;
  /** the pod to run in; refuses sandboxes that are not running (decideExecPod) */
  runningPod(id: string): Promise<{ cr: SandboxResource; podName: string }>;
}

export function sandboxLookup(p: Pick<KubernetesParts, "clients" | "namespace" | "index" | "clock">): SandboxLookup {
  const { index, clock } = p;
  const resource = async (id: string, graceMs = 0): Promise<SandboxResource> => {
    const cached = index.resource(id);
    if (cached) return cached;
    try {
      const cr = (await p.clients.custom.getNamespacedCustomObject({
        group: API_GROUP,
        version: API_VERSION,
        namespace: p.namespace,
        plural: SANDBOX_PLURAL,
        name: id,
      })) as SandboxResource;
      index.own.upsertResource(cr);
      return cr;
    } catch (err) {
      if (!isNotFound(err) || graceMs <= 0) throw toDomainError(err, "get sandbox", { kind: "sandbox", name: id });
    }
    for (let waited = 0; waited < graceMs; waited += 100) {
      await clock.sleep(100);
      const seen = index.resource(id);
      if (seen) return seen;
    }
    throw new NotFoundError("sandbox", id);
  };
  return {
    resource,
    async runningPod(id) {
      const cr = await resource(id);
      return { cr, podName: decideExecPod(id, cr, index.sandbox(id)) };
    },
  };
}
