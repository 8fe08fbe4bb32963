// The two directions between a create-time SandboxSpec and what the local backend keeps of a
// sandbox (its Sandbox in the slot record, plus image, size and env). Pure.
import type { Sandbox, SandboxSpec } from "../core/types.ts";
import type { SandboxRecord } from "./records.ts";

/** The Sandbox a new (or newly claimed) slot starts as. */
export function sandboxFor(spec: SandboxSpec, warm: boolean): Sandbox {
  return {
    id: spec.id,
    owner: spec.owner,
    profile: spec.image.profile,
    size: spec.size.name,
    phase: "Pending",
    ready: false,
    createdAt: spec.createdAt.toISOString(),
    expiresAt: new Date(spec.createdAt.getTime() + spec.ttlSeconds * 1000).toISOString(),
    warm,
    node: "local",
    clientKey: spec.clientKey,
    metadata: { ...spec.metadata },
    // persisted with the record, so the reaper and the auto-pause controller find them after a restart
    idleTimeoutSeconds: spec.idleTimeoutSeconds,
    ...(spec.autoPause ? { autoPause: spec.autoPause } : {}),
    cpuRequestMillis: spec.size.cpuRequestMillis,
    memoryRequestBytes: spec.size.memoryRequestBytes,
  };
}

/** The create-time spec back from a slot record, env included (a resume starts from it). */
export function specFromRecord(
  id: string,
  rec: SandboxRecord,
  defaultIdleTimeoutSeconds: number,
): SandboxSpec | undefined {
  const sb = rec.sandbox;
  if (!sb) return undefined;
  const createdAt = new Date(sb.createdAt);
  return {
    id,
    owner: sb.owner,
    image: { ...rec.image },
    size: { ...rec.size },
    env: { ...(rec.env ?? {}) },
    ttlSeconds: Math.max(1, Math.round((Date.parse(sb.expiresAt) - createdAt.getTime()) / 1000)),
    idleTimeoutSeconds: sb.idleTimeoutSeconds ?? defaultIdleTimeoutSeconds,
    ...(sb.clientKey ? { clientKey: sb.clientKey } : {}),
    metadata: { ...sb.metadata },
    createdAt,
    ...(sb.autoPause ? { autoPause: sb.autoPause } : {}),
  };
}
