// Probe results as status: what a probe printed, whether it succeeded, and since when it has
// said the same thing (lastTransitionTime, which the idle rule counts from). Pure.
import { PATTERN_LIMITS } from "./pattern.ts";
import type { ProbeSpec } from "./spec.ts";

/** the idle rule's pattern sees all of it (and never more: its cost grows with the input) */
export const MAX_MESSAGE_CHARS = PATTERN_LIMITS.input;

export interface ProbeOutcome {
  /** exit 0 within the timeout */
  ok: boolean;
  stdout: string;
  exitCode: number;
  timedOut: boolean;
}

export interface ProbeStatus {
  name: string;
  ok: boolean;
  /** trimmed stdout (only meaningful when ok; failed output is never used for decisions) */
  message: string;
  exitCode: number;
  timedOut: boolean;
  lastProbeTime: string;
  /** when (ok, message) last changed */
  lastTransitionTime: string;
}

export function applyProbeOutcome(
  prev: ProbeStatus | undefined,
  name: string,
  outcome: ProbeOutcome,
  now: Date,
): ProbeStatus {
  const message = outcome.stdout.trim().slice(0, MAX_MESSAGE_CHARS);
  const ok = outcome.ok && !outcome.timedOut && outcome.exitCode === 0;
  const same = prev !== undefined && prev.ok === ok && prev.message === message;
  return {
    name,
    ok,
    message,
    exitCode: outcome.exitCode,
    timedOut: outcome.timedOut,
    lastProbeTime: now.toISOString(),
    lastTransitionTime: same ? prev.lastTransitionTime : now.toISOString(),
  };
}

/** Probes due now: never run, or their period has passed since the last run. */
export function dueProbes(probes: ProbeSpec[], statuses: Record<string, ProbeStatus>, now: Date): ProbeSpec[] {
  return probes.filter((p) => {
    const s = statuses[p.name];
    return !s || Date.parse(s.lastProbeTime) + p.periodMs <= now.getTime();
  });
}

/** When the next probe falls due (undefined without probes). */
export function nextProbeAt(probes: ProbeSpec[], statuses: Record<string, ProbeStatus>, now: Date): Date | undefined {
  let t: number | undefined;
  for (const p of probes) {
    const s = statuses[p.name];
    const at = s ? Date.parse(s.lastProbeTime) + p.periodMs : now.getTime();
    t = t === undefined ? at : Math.min(t, at);
  }
  return t === undefined ? undefined : new Date(Math.max(t, now.getTime()));
}
