// The automatic pause/wake policy of a sandbox: what users write (AutoPauseInput) and the
// validated, normalized form the decision logic reads (AutoPausePolicy). Validation copies,
// never mutates, and throws ValidationError naming the field, the value and the fix.
import { ValidationError } from "../core/errors.ts";
import { parseDuration } from "./duration.ts";
import { parseDatetime } from "./schedule.ts";

export type TimeFormat = "unix" | "datetime";

export interface ProbeInput {
  /** unique per sandbox; rules reference it by this name */
  name: string;
  /** argv run inside the sandbox (not through a shell: use ["sh","-c","..."] for pipes) */
  command: string[];
  /** default 30 */
  periodSeconds?: number;
  /** default 5; a probe running longer counts as failed */
  timeoutSeconds?: number;
}

export interface AutoPauseInput {
  probes?: ProbeInput[];
  pause?: {
    /** pause after the probe's stdout matched messageRegex continuously for thresholdDuration (0 = first match) */
    whenProbedIdle?: { probe: string; messageRegex: string; thresholdDuration: string | number };
    /** pause after this long without API activity (exec, files, ...) */
    afterInactivity?: string | number;
    /** one-shot absolute pause time, RFC3339 with zone; not cancelled by probes reporting active */
    pauseTime?: string;
  };
  resume?: {
    /** wake leadTime (default 5m) before the time the probe prints (unix seconds or RFC3339) */
    whenProbedSchedule?: { probe: string; timeFormat?: TimeFormat; leadTime?: string | number };
  };
  /** counted from creation and re-armed at every automatic wake */
  timeout?: { after: string | number; action: "pause" | "kill" };
}

export interface ProbeSpec {
  name: string;
  command: string[];
  periodMs: number;
  timeoutMs: number;
}

export interface AutoPausePolicy {
  probes: ProbeSpec[];
  idle?: { probe: string; messageRegex: RegExp; thresholdMs: number };
  inactivityMs?: number;
  pauseTime?: Date;
  schedule?: { probe: string; timeFormat: TimeFormat; leadMs: number };
  timeout?: { afterMs: number; action: "pause" | "kill" };
}

const PROBE_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
export const DEFAULT_LEAD_MS = 5 * 60_000;

export function validateAutoPause(input: AutoPauseInput, field = "autoPause"): AutoPausePolicy {
  if (!input || typeof input !== "object") throw new ValidationError(field, input, "use an object with probes, pause, resume and timeout");
  const probes = (input.probes ?? []).map((p, i) => validateProbe(p, `${field}.probes[${i}]`));
  const names = new Set<string>();
  for (const [i, p] of probes.entries()) {
    if (names.has(p.name)) throw new ValidationError(`${field}.probes[${i}].name`, p.name, "probe names must be unique; rename one of them");
    names.add(p.name);
  }
  const ref = (f: string, name: unknown): string => {
    if (typeof name !== "string" || !names.has(name)) {
      const have = names.size ? `one of: ${[...names].join(", ")}` : "none are defined";
      throw new ValidationError(f, name, `reference a probe defined under ${field}.probes (${have})`);
    }
    return name;
  };
  const policy: AutoPausePolicy = { probes };
  const idle = input.pause?.whenProbedIdle;
  if (idle) {
    const f = `${field}.pause.whenProbedIdle`;
    const probe = ref(`${f}.probe`, idle.probe);
    let messageRegex: RegExp;
    try {
      if (typeof idle.messageRegex !== "string" || idle.messageRegex === "") throw new Error("empty");
      messageRegex = new RegExp(idle.messageRegex);
    } catch {
      throw new ValidationError(`${f}.messageRegex`, idle.messageRegex, 'use a non-empty JavaScript regular expression matching the idle output, e.g. "^inactive$"');
    }
    if (idle.thresholdDuration === undefined) throw new ValidationError(`${f}.thresholdDuration`, undefined, "required: how long the probe must report idle (0 = pause at the first idle report)");
    policy.idle = { probe, messageRegex, thresholdMs: parseDuration(`${f}.thresholdDuration`, idle.thresholdDuration) };
  }
  if (input.pause?.afterInactivity !== undefined) {
    const ms = parseDuration(`${field}.pause.afterInactivity`, input.pause.afterInactivity);
    if (ms <= 0) throw new ValidationError(`${field}.pause.afterInactivity`, input.pause.afterInactivity, "use a positive duration, or leave it out to never pause on inactivity");
    policy.inactivityMs = ms;
  }
  if (input.pause?.pauseTime !== undefined) {
    const t = parseDatetime(input.pause.pauseTime);
    if (!t) throw new ValidationError(`${field}.pause.pauseTime`, input.pause.pauseTime, "use an RFC3339 time with a zone, e.g. 2026-09-04T10:00:00Z or 2026-09-04T18:00:00+08:00");
    policy.pauseTime = t;
  }
  const sched = input.resume?.whenProbedSchedule;
  if (sched) {
    const f = `${field}.resume.whenProbedSchedule`;
    const probe = ref(`${f}.probe`, sched.probe);
    const timeFormat = sched.timeFormat ?? "unix";
    if (timeFormat !== "unix" && timeFormat !== "datetime") throw new ValidationError(`${f}.timeFormat`, sched.timeFormat, 'use "unix" (seconds, positive integer) or "datetime" (RFC3339 with zone)');
    policy.schedule = { probe, timeFormat, leadMs: sched.leadTime === undefined ? DEFAULT_LEAD_MS : parseDuration(`${f}.leadTime`, sched.leadTime) };
  }
  if (input.timeout !== undefined) {
    const f = `${field}.timeout`;
    const afterMs = parseDuration(`${f}.after`, input.timeout.after);
    if (afterMs <= 0) throw new ValidationError(`${f}.after`, input.timeout.after, "use a positive duration");
    if (input.timeout.action !== "pause" && input.timeout.action !== "kill") throw new ValidationError(`${f}.action`, input.timeout.action, 'use "pause" or "kill"');
    policy.timeout = { afterMs, action: input.timeout.action };
  }
  return policy;
}

function validateProbe(p: ProbeInput, f: string): ProbeSpec {
  if (!p || typeof p !== "object") throw new ValidationError(f, p, "use an object with name, command, periodSeconds, timeoutSeconds");
  if (typeof p.name !== "string" || !PROBE_NAME.test(p.name)) throw new ValidationError(`${f}.name`, p.name, "use 1-63 letters, digits, '_' or '-', starting with a letter");
  if (!Array.isArray(p.command) || p.command.length === 0 || p.command.some((c) => typeof c !== "string")) {
    throw new ValidationError(`${f}.command`, p.command, 'use a non-empty array of strings, e.g. ["sh", "-c", "echo idle"]');
  }
  const period = p.periodSeconds ?? 30;
  const timeout = p.timeoutSeconds ?? 5;
  if (!Number.isInteger(period) || period < 1) throw new ValidationError(`${f}.periodSeconds`, p.periodSeconds, "use a whole number of seconds, at least 1");
  if (!Number.isInteger(timeout) || timeout < 1) throw new ValidationError(`${f}.timeoutSeconds`, p.timeoutSeconds, "use a whole number of seconds, at least 1");
  if (timeout > period) throw new ValidationError(`${f}.timeoutSeconds`, timeout, `must not exceed periodSeconds (${period}) so runs never overlap`);
  return { name: p.name, command: [...p.command], periodMs: period * 1000, timeoutMs: timeout * 1000 };
}
