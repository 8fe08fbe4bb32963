// The automatic pause/wake decision: a pure function of (policy, observed state, now).
// Conservative where the reference is: a failed or timed-out probe never pauses; a failed
// schedule probe blocks probe-driven pauses (we could not wake in time); unparseable schedule
// output just means no schedule. Stricter where it helps: no idle or inactivity pause inside
// the wake window (after nextResumeTime, before the task itself), so a woken sandbox is not
// put straight back to sleep before its scheduled work.
import type { ProbeStatus } from "./probe.ts";
import { parseScheduleTime } from "./schedule.ts";
import type { AutoPausePolicy } from "./spec.ts";

export type PauseReason = "probedIdle" | "inactivity" | "pauseTime" | "timeout";
export type ResumeReason = "probedSchedule";

export interface AutoPauseState {
  phase: "running" | "paused";
  createdAt: Date;
  /** last API activity (exec, files, ...) */
  lastActivityAt?: Date;
  /** the last automatic or manual wake; re-arms the timeout */
  resumedAt?: Date;
  /** results of this run's probes (cleared at pause: a paused sandbox runs no probes) */
  probes: Record<string, ProbeStatus>;
  /** recorded while running; the wake trigger while paused */
  nextResumeTime?: Date;
}

export interface Decision {
  action: "none" | "pause" | "resume" | "kill";
  reason?: PauseReason | ResumeReason | "timeout";
  /** predicted automatic pause (earliest rule), for status */
  nextPauseTime?: Date;
  nextPauseReason?: PauseReason;
  /** predicted wake, for status; recorded and used while paused */
  nextResumeTime?: Date;
  /** decide again no later than this (absent: only when a probe reports) */
  recheckAt?: Date;
}

export function decideAutoPause(policy: AutoPausePolicy, state: AutoPauseState, now: Date): Decision {
  const t = now.getTime();
  const armedAt = Math.max(state.createdAt.getTime(), state.resumedAt?.getTime() ?? 0);
  const killAt = policy.timeout?.action === "kill" ? state.createdAt.getTime() + policy.timeout.afterMs : undefined;
  if (killAt !== undefined && killAt <= t) return { action: "kill", reason: "timeout" };

  if (state.phase === "paused") {
    const wake = state.nextResumeTime?.getTime();
    if (wake !== undefined && wake <= t) return { action: "resume", reason: "probedSchedule" };
    return { action: "none", nextResumeTime: state.nextResumeTime, recheckAt: earliest([wake, killAt]) };
  }

  const schedule = scheduleFrom(policy, state, t);
  const candidates: [number, PauseReason][] = [];
  if (policy.pauseTime) candidates.push([policy.pauseTime.getTime(), "pauseTime"]);
  if (policy.timeout?.action === "pause") candidates.push([armedAt + policy.timeout.afterMs, "timeout"]);
  // soft rules wait while the schedule probe cannot be read (we could not wake in time) and
  // inside the wake window; pauseTime and the timeout are hard and always apply
  if (!schedule.awake && !schedule.blocked) {
    if (policy.inactivityMs !== undefined) {
      const last = Math.max(armedAt, state.lastActivityAt?.getTime() ?? 0);
      candidates.push([last + policy.inactivityMs, "inactivity"]);
    }
    const idleAt = idlePauseAt(policy, state);
    if (idleAt !== undefined) candidates.push([idleAt, "probedIdle"]);
  }
  candidates.sort((a, b) => a[0] - b[0]);
  const next = candidates[0];
  const base = { nextResumeTime: schedule.nextResumeTime };
  if (next && next[0] <= t) return { action: "pause", reason: next[1], ...base };
  return {
    action: "none",
    ...base,
    nextPauseTime: next ? new Date(next[0]) : undefined,
    nextPauseReason: next?.[1],
    recheckAt: earliest([next?.[0], killAt, schedule.awakeUntil]),
  };
}

/** When the idle rule would pause: the idle report's start plus the threshold; undefined unless currently idle. */
function idlePauseAt(policy: AutoPausePolicy, state: AutoPauseState): number | undefined {
  if (!policy.idle) return undefined;
  const s = state.probes[policy.idle.probe];
  if (!s?.ok || !policy.idle.messageRegex.test(s.message)) return undefined;
  return Date.parse(s.lastTransitionTime) + policy.idle.thresholdMs;
}

interface ScheduleView {
  nextResumeTime?: Date;
  /** the schedule probe failed or has not reported: probe-driven pauses wait */
  blocked: boolean;
  /** inside [wake, task): stay up for the scheduled work */
  awake: boolean;
  awakeUntil?: number;
}

function scheduleFrom(policy: AutoPausePolicy, state: AutoPauseState, t: number): ScheduleView {
  if (!policy.schedule) return { blocked: false, awake: false };
  const s = state.probes[policy.schedule.probe];
  if (!s?.ok) return { blocked: true, awake: false };
  const task = parseScheduleTime(s.message, policy.schedule.timeFormat)?.getTime();
  if (task === undefined || task <= t) return { blocked: false, awake: false };
  const wake = task - policy.schedule.leadMs;
  return { nextResumeTime: new Date(wake), blocked: false, awake: wake <= t, awakeUntil: wake <= t ? task : undefined };
}

function earliest(ts: (number | undefined)[]): Date | undefined {
  const v = ts.filter((x): x is number => x !== undefined);
  return v.length ? new Date(Math.min(...v)) : undefined;
}
