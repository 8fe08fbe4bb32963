// Automatic pause/wake status (runtime/autopause) kept in the Sandbox object's status, so a
// paused sandbox's wake time survives a restart and a leader change, and kubectl shows it:
// the whole status in status.autoPause, with probes, nextPauseTime and nextResumeTime also at
// the top of status (the reference's field names).
import type { CustomObjectsApi } from "@kubernetes/client-node";
import type { AutoPauseStatus, AutoPauseStatusStore } from "../autopause/controller.ts";
import { isNotFound, mergePatch, toDomainError } from "./client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { SandboxResource } from "./resource.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

export class SandboxAutoPauseStore implements AutoPauseStatusStore {
  constructor(private readonly o: { namespace: string; custom: CustomObjectsApi; index: SandboxIndex }) {}

  async get(id: string): Promise<AutoPauseStatus | undefined> {
    const s = this.o.index.resource(id)?.status?.autoPause;
    return s ? structuredClone(s) : undefined;
  }

  async put(id: string, status: AutoPauseStatus): Promise<void> {
    await this.write(id, status);
  }

  async delete(id: string): Promise<void> {
    await this.write(id, undefined);
  }

  private async write(id: string, next: AutoPauseStatus | undefined): Promise<void> {
    const prev = this.o.index.resource(id)?.status;
    const want = {
      autoPause: next,
      probes: next?.probes,
      nextPauseTime: next?.nextPauseTime,
      nextResumeTime: next?.nextResumeTime,
    };
    const have = {
      autoPause: prev?.autoPause,
      probes: prev?.probes,
      nextPauseTime: prev?.nextPauseTime,
      nextResumeTime: prev?.nextResumeTime,
    };
    const patch = mergePatchBetween(have, want);
    if (patch === undefined) return;
    try {
      const updated = (await this.o.custom.patchNamespacedCustomObjectStatus(
        {
          group: API_GROUP,
          version: API_VERSION,
          namespace: this.o.namespace,
          plural: SANDBOX_PLURAL,
          name: id,
          body: { status: patch },
        },
        mergePatch,
      )) as SandboxResource;
      this.o.index.own.upsertResource(updated);
    } catch (err) {
      if (!isNotFound(err)) throw toDomainError(err, "write the auto pause status", { kind: "sandbox", name: id });
    }
  }
}

/**
 * The JSON merge patch (RFC 7386) that turns `from` into `to`: changed keys, nested objects
 * patched key by key, removed keys as null. undefined when nothing changed.
 */
export function mergePatchBetween(from: unknown, to: unknown): unknown {
  const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObj(from) || !isObj(to))
    return JSON.stringify(from) === JSON.stringify(to) ? undefined : to === undefined ? null : to;
  const out: Record<string, unknown> = {};
  for (const k of new Set([...Object.keys(from), ...Object.keys(to)])) {
    if (to[k] === undefined) {
      if (from[k] !== undefined) out[k] = null;
      continue;
    }
    const d = mergePatchBetween(from[k], to[k]);
    if (d !== undefined) out[k] = d;
  }
  return Object.keys(out).length ? out : undefined;
}
