// Two decisions of the Kubernetes backend, pure: whether a create is new or a retry of one
// already accepted (idempotent accept), and which pod a command or a file transfer goes to.
import { ConflictError, SandboxFailedError } from "../core/errors.ts";
import type { Sandbox, SandboxSpec } from "../core/types.ts";
import { podNameOf, type SandboxResource } from "./resource.ts";

/**
 * "new": write the record. "existing": the same owner retried with the same clientKey, so the
 * sandbox already accepted is the answer. Anything else under that id is a 409.
 */
export function decideAccept(
  existing: SandboxResource | undefined,
  spec: Pick<SandboxSpec, "id" | "owner" | "clientKey">,
): "new" | "existing" {
  if (!existing) return "new";
  if (existing.spec.owner === spec.owner && existing.spec.clientKey && existing.spec.clientKey === spec.clientKey)
    return "existing";
  throw new ConflictError(
    `sandbox ${spec.id} already exists; retry with the same clientKey to get it back, or use a new id`,
    { id: spec.id },
  );
}

/** The pod to run in: a finished sandbox is a SandboxFailedError, one not ready yet a 409. */
export function decideExecPod(id: string, cr: SandboxResource, sb: Sandbox | undefined): string {
  if (sb && (sb.phase === "Failed" || sb.phase === "Succeeded"))
    throw new SandboxFailedError(id, sb.reason ?? sb.phase, sb.message);
  if (!sb?.ready)
    throw new ConflictError(
      `sandbox ${id} is not ready (phase ${sb?.phase ?? "unknown"}${sb?.reason ? `, ${sb.reason}` : ""}); wait for it first`,
      { id },
    );
  return podNameOf(cr);
}
