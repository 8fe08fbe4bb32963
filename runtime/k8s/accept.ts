// The accept path of a create: the Sandbox record is visible to this replica at once and
// persisted by the write-behind RecordWriter; a retry with the same owner and clientKey is
// answered with the sandbox already accepted (decideAccess.ts). A record that cannot be written
// fails its sandbox, and the warm pod it had claimed goes.
import type { SandboxSpec } from "../core/types.ts";
import { statusCode } from "./client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import { decideAccept } from "./decideAccess.ts";
import type { KubernetesParts } from "./parts.ts";
import { discardClaimedPod } from "./pause.ts";
import { RecordWriter } from "./recordWriter.ts";
import { buildSandboxResource, type SandboxResource } from "./resource.ts";

export interface Acceptor {
  readonly records: RecordWriter;
  /** Accepts spec's record (claimed warm pod, extra annotations); a same-key retry is a no-op. */
  accept(spec: SandboxSpec, podName?: string, annotations?: Record<string, string>): void;
  /**
   * Accepts like accept() (the index has the record at once) but queues its write only on
   * release(podName): a write-behind warm claim (runtime/k8s/claims) writes the record once its
   * pod patch settled, naming the pod if it landed and none (a cold pod) if it was lost. So a
   * written record never points at a pod that is not its own. Undefined for a same-key retry.
   */
  hold(
    spec: SandboxSpec,
    podName: string,
    annotations?: Record<string, string>,
  ): { release(podName: string | undefined): void } | undefined;
}

// Over 60 lines on purpose: accept, its retry and its failure share the record writer and the claimed pods in this
// closure.
export function createAcceptor(p: KubernetesParts, onWritten: (id: string) => void): Acceptor {
  const { clock, logger, index, namespace } = p;
  const { core, custom } = p.clients;
  const records = new RecordWriter({
    clock,
    logger,
    create: async (cr) =>
      (await custom.createNamespacedCustomObject({
        group: API_GROUP,
        version: API_VERSION,
        namespace,
        plural: SANDBOX_PLURAL,
        body: cr,
      })) as SandboxResource,
    isConflict: (err) => statusCode(err) === 409,
    onWritten: (created) => {
      index.own.upsertResource(created);
      onWritten(created.metadata.name);
    },
    onFailed: (id, reason, message) => fail(id, reason, message),
  });
  // A record that cannot be written fails its sandbox, and the warm pod it had claimed goes.
  function fail(id: string, reason: string, message: string): void {
    const cr = index.resource(id);
    logger.error({ sandbox: id, reason, err: message }, "sandbox record not written; the sandbox fails");
    if (cr)
      index.own.upsertResource({
        ...cr,
        status: { ...(cr.status ?? {}), phase: "Failed", reason, message, finishedAt: clock.now().toISOString() },
      });
    const podName = cr?.spec.podName;
    if (podName) void discardClaimedPod({ core, namespace, logger }, id, podName, "create");
  }
  return {
    records,
    accept(spec, podName, annotations = {}) {
      if (decideAccept(index.resource(spec.id), spec) === "existing") return;
      records.checkRoom();
      const body = buildSandboxResource(spec, namespace, { podName });
      Object.assign(body.metadata.annotations!, annotations);
      index.own.upsertResource(body);
      records.enqueue(body);
    },
    hold(spec, podName, annotations = {}) {
      if (decideAccept(index.resource(spec.id), spec) === "existing") return undefined;
      records.checkRoom();
      const body = buildSandboxResource(spec, namespace, { podName });
      Object.assign(body.metadata.annotations!, annotations);
      index.own.upsertResource(body);
      return {
        release(final) {
          // deleted meanwhile (backend.delete waits for the claim, then finds nothing written)
          if (index.resource(spec.id) !== body) return;
          const out = final ? body : buildSandboxResource(spec, namespace, {});
          if (!final) {
            Object.assign(out.metadata.annotations!, annotations);
            index.own.upsertResource(out);
          }
          try {
            records.enqueue(out);
          } catch (err) {
            // the backlog filled up while the pod patch was in flight: the sandbox fails, cleanly
            fail(spec.id, "RecordBacklog", (err as Error).message);
          }
        },
      };
    },
  };
}
