// A team's paused-snapshot limits (docs/tenancy.md): how many paused sandboxes it keeps and how
// many bytes their snapshots hold. Checked at pause time, not at create: a pause is refused before
// it starts when the count is at its limit (or the bytes already are), and once the snapshot is
// written, before it is recorded, when its size would take the team past pausedBytes; the pause
// then unwinds and the sandbox keeps running. Pure: what the team holds and its limits in.
import type { TeamLimits } from "../config/tenancy.ts";
import type { PausedSnapshot } from "./types.ts";

export interface PausedUse {
  sandboxes: number;
  bytes: number;
}

export type PausedLimit = "pausedSandboxes" | "pausedBytes";

/**
 * The limits one more paused sandbox of `adding` bytes would pass; empty when it fits. Before
 * the snapshot exists `adding` is 1 (a snapshot is never empty), so a team whose snapshots already
 * fill pausedBytes is refused without writing one more.
 */
export function decidePausedQuota(limits: TeamLimits, held: PausedUse, adding: number): PausedLimit[] {
  const over: PausedLimit[] = [];
  if (limits.pausedSandboxes !== undefined && held.sandboxes + 1 > limits.pausedSandboxes) over.push("pausedSandboxes");
  if (limits.pausedBytes !== undefined && held.bytes + adding > limits.pausedBytes) over.push("pausedBytes");
  return over;
}

/** What the team holds paused, this sandbox left out (a re-pause replaces its own snapshot). */
export function pausedUseOf(
  snapshots: readonly PausedSnapshot[],
  inTeam: (s: PausedSnapshot) => boolean,
  except: string,
): PausedUse {
  const use: PausedUse = { sandboxes: 0, bytes: 0 };
  for (const s of snapshots) {
    if (s.id === except || !inTeam(s)) continue;
    use.sandboxes += 1;
    use.bytes += s.sizeBytes;
  }
  return use;
}

/** true when the team has a paused limit at all (else a pause skips listing the records). */
export function hasPausedLimits(limits: TeamLimits | undefined): boolean {
  return limits?.pausedSandboxes !== undefined || limits?.pausedBytes !== undefined;
}
