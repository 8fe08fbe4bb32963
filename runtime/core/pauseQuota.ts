// The paused-snapshot quotas of a pause (decidePausedQuota.ts), as TransitionHooks run in the
// sandbox's pause/resume queue turn: the count (and bytes already full) before anything moves,
// the bytes again once the snapshot's size is known. A refusal is the 429 team_quota that create
// answers, naming the team and the limit. Pauses of one team on several sandboxes at once each
// see the others' records from "pausing" on, so they overshoot by at most the ones that started
// in the same instant: the cost of not holding a team-wide lock across a snapshot's upload.
import type { TenancyConfig } from "../config/tenancy.ts";
import { teamOfSandbox } from "../config/tenancy.ts";
import { decidePausedQuota, hasPausedLimits, type PausedLimit, pausedUseOf } from "./decidePausedQuota.ts";
import { CapacityError } from "./errors.ts";
import { formatMemory } from "./quantity.ts";
import type { PausedSnapshot, TransitionHooks } from "./types.ts";

const bytes = (n: number) => (n === 0 ? "0" : formatMemory(n));

export interface PauseQuotaOptions {
  tenancy: TenancyConfig | undefined;
  /** the pause/resume records of every kept snapshot */
  pausedSnapshots(): Promise<PausedSnapshot[]>;
  /** Retry-After of a refusal: a paused quota frees when the team deletes or resumes one */
  retryAfterSeconds: number;
}

/** The hooks to add to a pause of sandbox `s`; none when its team has no paused limit. */
export function pauseQuota(
  s: { id: string; owner: string; metadata?: Record<string, string> },
  o: PauseQuotaOptions,
): Partial<TransitionHooks> {
  const t = o.tenancy;
  if (!t?.enabled) return {};
  const id = s.id;
  const team = teamOfSandbox(t, s);
  const limits = t.teams[team]?.limits;
  if (!limits || !hasPausedLimits(limits)) return {};
  const check = async (adding: number) => {
    const held = pausedUseOf(await o.pausedSnapshots(), (x) => teamOfSandbox(t, x) === team, id);
    const over = decidePausedQuota(limits, held, adding);
    if (over.length === 0) return;
    const what = over.map((k: PausedLimit) =>
      k === "pausedSandboxes"
        ? `paused sandboxes (${limits.pausedSandboxes}, ${held.sandboxes} held)`
        : `paused snapshot bytes (${bytes(limits.pausedBytes ?? 0)}, ${bytes(held.bytes)} held${adding > 1 ? ` + this snapshot's ${bytes(adding)}` : ""})`,
    );
    throw new CapacityError(
      `pause: team ${team} is at its limit on ${what.join(" and ")}; sandbox ${id} keeps running. Delete or resume some of the team's paused sandboxes, or raise tenancy.teams[${team}].limits.${over[0]}`,
      o.retryAfterSeconds,
      { reason: "team_quota", team, short: over },
    );
  };
  return { before: () => check(1), snapshotWritten: (bytes) => check(bytes) };
}
