// What the local backend does at start with each slot directory a previous process left, decided
// from its record, whether the slot's helper still answers, and the time; no I/O (the backend's
// recover() observes, then applies the plan).
import { type Sandbox, TERMINAL_PHASES } from "../core/types.ts";
import type { SandboxRecord } from "./records.ts";

export type SlotRecoveryPlan =
  /** no readable record: nothing can be adopted; remove the directory and its cgroups */
  | { action: "remove" }
  /** an unclaimed warm slot still alive: back to the pool (destroyed if the pool has no room) */
  | { action: "offer-to-pool" }
  /** an unclaimed warm slot whose helper is gone */
  | { action: "destroy" }
  /** a live sandbox: adopt it (its TTL re-armed); `sandbox` set when its record must change */
  | { action: "adopt"; sandbox?: Sandbox }
  /** a sandbox that had already ended: listed as it ended, its processes stopped */
  | { action: "keep-ended" }
  /** a sandbox that was live but whose helper is gone: it failed while nobody watched */
  | { action: "mark-lost"; sandbox: Sandbox };

/** Whether to ask the helper at all: an ended sandbox is never brought back. */
export function shouldProbeSlot(record: SandboxRecord): boolean {
  return !(record.sandbox && TERMINAL_PHASES.has(record.sandbox.phase));
}

export function planSlotRecovery(
  record: SandboxRecord | undefined,
  observed: { alive: boolean },
  now: Date,
): SlotRecoveryPlan {
  if (!record) return { action: "remove" };
  const sb = record.sandbox;
  if (!sb) return observed.alive ? { action: "offer-to-pool" } : { action: "destroy" };
  if (TERMINAL_PHASES.has(sb.phase)) return { action: "keep-ended" };
  if (observed.alive) {
    // the previous process crashed between start and ready; the helper made it since
    return sb.ready
      ? { action: "adopt" }
      : { action: "adopt", sandbox: { ...sb, phase: "Running", ready: true, readyAt: now.toISOString() } };
  }
  return {
    action: "mark-lost",
    sandbox: {
      ...sb,
      phase: "Failed",
      ready: false,
      reason: "Lost",
      message:
        "the sandbox was not running when the local backend restarted; the workspace is kept until it is deleted",
    },
  };
}
