// The auto-resume rule, in one place: whether a call that needs a running sandbox (exec, files,
// logs, wait; traffic later) may wake a paused one. The flag is fixed when the sandbox is paused
// (metadata sbx.auto-resume, else the service's default) and kept in the record, so a change of
// the default never surprises a sandbox that is already asleep.
import { ConflictError } from "../core/errors.ts";
import type { SnapshotRecord } from "./record.ts";

/** Sandbox metadata that turns automatic resume on ("true") or off ("false"). */
export const AUTO_RESUME_KEY = "sbx.auto-resume";

/** The flag recorded at pause time. */
export function allowsAutoResume(metadata: Record<string, string>, fallback: boolean): boolean {
  return (metadata[AUTO_RESUME_KEY] ?? String(fallback)) === "true";
}

const PHASE_WORD = { pausing: "pausing", paused: "paused", resuming: "resuming" } as const;

/**
 * What a call named `what` does about the sandbox's pause state: go ahead ("run"), or wake it
 * first ("wake"). A sandbox that does not allow auto-resume is a 409 naming the fix.
 */
export function decideAutoResume(rec: SnapshotRecord | undefined, what: string): "run" | "wake" {
  if (!rec || rec.state === "running") return "run";
  if (rec.autoResume) return "wake";
  const phase = PHASE_WORD[rec.state];
  throw new ConflictError(
    `${what}: sandbox ${rec.id} is ${phase} and does not allow auto-resume: resume it first (sbx resume ${rec.id}), or create sandboxes with metadata ${AUTO_RESUME_KEY}=true`,
    { id: rec.id, phase: phase[0].toUpperCase() + phase.slice(1) },
  );
}
