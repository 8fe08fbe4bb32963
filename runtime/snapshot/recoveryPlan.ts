// What crash recovery does with one pause/resume record, decided from the record, what was
// observed of the sandbox and the registry, and the time; no I/O (the Snapshotter observes,
// then applies the plan). The table in docs/pause-resume.md "The state machine and crash safety".
import type { SandboxPhase } from "../core/types.ts";
import type { SnapshotInfo, SnapshotRecord } from "./record.ts";

export interface RecoveryObserved {
  /** the backend's phase of the sandbox; undefined when it has no such sandbox */
  livePhase?: SandboxPhase;
  /** the manifest under the record's pending tag, when one was put */
  pendingManifest?: { digest: string };
  /** that manifest read back and verified complete (observed only when the compute is gone) */
  pendingSnapshot?: SnapshotInfo;
}

export interface RecoveryPolicy {
  /** this process's name (records shared by replicas name their holder) */
  holder?: string;
  /** another holder's in-flight record younger than this is left alone; undefined = one process owns the store */
  inFlightGraceMs?: number;
}

export type RecoveryPlan =
  /** nothing was interrupted */
  | { action: "keep" }
  /** another live replica is driving it: not ours to finish or undo */
  | { action: "refuse"; holder: string; ageMs: number; graceMs: number }
  /** pause interrupted before it was recorded, compute alive: back to running, drop the half-written manifest */
  | { action: "back-to-running"; deleteManifest?: string }
  /** compute lost mid-pause: a complete pending snapshot (promote) or the previous one (keep-previous) becomes the paused copy */
  | { action: "promote"; snapshot: SnapshotInfo }
  | { action: "keep-previous" }
  /** compute lost mid-pause with no snapshot at all: the data is gone; the record goes */
  | { action: "drop" }
  /** crash between recording paused and releasing the compute */
  | { action: "release" }
  /** crash mid-resume: discard the half-restored compute, back to paused with the snapshot */
  | { action: "discard-resume" };

const TERMINAL: ReadonlySet<SandboxPhase> = new Set(["Failed", "Succeeded"]);

/** True when the backend still runs compute for the sandbox (a released one reports Paused or nothing). */
export function computeAlive(phase: SandboxPhase | undefined): boolean {
  return phase !== undefined && !TERMINAL.has(phase) && phase !== "Paused";
}

export function planRecovery(
  rec: SnapshotRecord,
  observed: RecoveryObserved,
  now: Date,
  policy: RecoveryPolicy = {},
): RecoveryPlan {
  const inFlight = rec.state === "pausing" || rec.state === "resuming";
  const grace = policy.inFlightGraceMs;
  if (inFlight && grace && rec.holder && rec.holder !== policy.holder) {
    const ageMs = now.getTime() - Date.parse(rec.updatedAt);
    if (ageMs < grace) return { action: "refuse", holder: rec.holder, ageMs, graceMs: grace };
  }
  switch (rec.state) {
    case "pausing":
      if (computeAlive(observed.livePhase))
        return {
          action: "back-to-running",
          ...(observed.pendingManifest ? { deleteManifest: observed.pendingManifest.digest } : {}),
        };
      if (observed.pendingSnapshot) return { action: "promote", snapshot: observed.pendingSnapshot };
      if (rec.snapshot) return { action: "keep-previous" };
      return { action: "drop" };
    case "paused":
      return rec.computeReleased ? { action: "keep" } : { action: "release" };
    case "resuming":
      return { action: "discard-resume" };
    case "running":
      return { action: "keep" };
  }
}
