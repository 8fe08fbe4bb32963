// The automatic pause/wake policy of a sandbox: what users write (AutoPauseInput) and the
// validated, normalized form the decision logic reads (AutoPausePolicy). Validation copies,
// never mutates, and is strict and total: for any JSON value it returns a policy or throws a
// ValidationError naming the exact field path, a preview of the bad value and the fix. Unknown
// keys at any level, null, and wrong types are refused; every size is bounded.
import { parseDuration } from "./duration.ts";
import { compileTenantPattern } from "./pattern.ts";
import { parseDatetime } from "./schedule.ts";
import { type Doc, has, invalid, own, strictObject } from "./strict.ts";

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
  /** messageRegex is a LinearRegExp (pattern.ts): RE2 syntax, matched in linear time */
  idle?: { probe: string; messageRegex: RegExp; thresholdMs: number };
  inactivityMs?: number;
  pauseTime?: Date;
  schedule?: { probe: string; timeFormat: TimeFormat; leadMs: number };
  timeout?: { afterMs: number; action: "pause" | "kill" };
}

const PROBE_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
export const DEFAULT_LEAD_MS = 5 * 60_000;

/** Sizes a document may have: each probe is an exec every period in every sandbox that has it. */
export const AUTOPAUSE_LIMITS = {
  probes: 16,
  commandArgs: 64,
  argChars: 4096,
  /** a day; a longer period or timeout would be no probe at all */
  periodSeconds: 86_400,
  pauseTimeChars: 64,
} as const;

const KEYS = {
  root: ["probes", "pause", "resume", "timeout"],
  probe: ["name", "command", "periodSeconds", "timeoutSeconds"],
  pause: ["whenProbedIdle", "afterInactivity", "pauseTime"],
  idle: ["probe", "messageRegex", "thresholdDuration"],
  resume: ["whenProbedSchedule"],
  schedule: ["probe", "timeFormat", "leadTime"],
  timeout: ["after", "action"],
} as const;

const leaveOut = (f: string) => `; or leave ${f} out`;

export function validateAutoPause(input: unknown, field = "autoPause"): AutoPausePolicy {
  const doc = strictObject(field, input, KEYS.root, " (docs/pause-resume.md)");
  const probes = validateProbes(`${field}.probes`, own(doc, "probes"));
  const ref = probeRef(`${field}.probes`, probes);
  const policy: AutoPausePolicy = { probes };
  if (has(doc, "pause")) Object.assign(policy, validatePause(`${field}.pause`, own(doc, "pause"), ref));
  if (has(doc, "resume")) {
    const resume = strictObject(`${field}.resume`, own(doc, "resume"), KEYS.resume, leaveOut(`${field}.resume`));
    if (has(resume, "whenProbedSchedule"))
      policy.schedule = validateSchedule(`${field}.resume.whenProbedSchedule`, own(resume, "whenProbedSchedule"), ref);
  }
  if (has(doc, "timeout")) policy.timeout = validateTimeout(`${field}.timeout`, own(doc, "timeout"));
  return policy;
}

type ProbeRef = (field: string, name: unknown) => string;

/** A rule's `probe`: the name of a probe defined under probes. */
function probeRef(probesField: string, probes: ProbeSpec[]): ProbeRef {
  const names = new Set(probes.map((p) => p.name));
  return (f, name) => {
    if (typeof name !== "string" || !names.has(name)) {
      const have = names.size ? `one of: ${[...names].join(", ")}` : "none are defined";
      invalid(f, name, `reference a probe defined under ${probesField} (${have})`);
    }
    return name;
  };
}

function validateProbes(f: string, value: unknown): ProbeSpec[] {
  if (value === undefined) return [];
  if (!Array.isArray(value))
    invalid(
      f,
      value,
      `use an array of probes, e.g. [{"name": "Active", "command": ["sh", "-c", "echo idle"]}]${leaveOut(f)}`,
    );
  if (value.length > AUTOPAUSE_LIMITS.probes) invalid(f, value, `use at most ${AUTOPAUSE_LIMITS.probes} probes`);
  const probes: ProbeSpec[] = [];
  const names = new Set<string>();
  // an index loop, not map: map skips the holes of a sparse array, and a hole is no probe
  for (let i = 0; i < value.length; i++) {
    const p = validateProbe(`${f}[${i}]`, value[i]);
    if (names.has(p.name)) invalid(`${f}[${i}].name`, p.name, "probe names must be unique; rename one of them");
    names.add(p.name);
    probes.push(p);
  }
  return probes;
}

function validateProbe(f: string, value: unknown): ProbeSpec {
  const p = strictObject(f, value, KEYS.probe);
  const name = own(p, "name");
  if (typeof name !== "string" || !PROBE_NAME.test(name))
    invalid(`${f}.name`, name, "use 1-63 letters, digits, '_' or '-', starting with a letter");
  const command = validateCommand(`${f}.command`, own(p, "command"));
  const period = wholeSeconds(`${f}.periodSeconds`, own(p, "periodSeconds"), 30);
  const timeout = wholeSeconds(`${f}.timeoutSeconds`, own(p, "timeoutSeconds"), 5);
  if (timeout > period)
    invalid(`${f}.timeoutSeconds`, timeout, `must not exceed periodSeconds (${period}) so runs never overlap`);
  return { name, command, periodMs: period * 1000, timeoutMs: timeout * 1000 };
}

function validateCommand(f: string, value: unknown): string[] {
  const fix = 'use a non-empty array of strings, e.g. ["sh", "-c", "echo idle"]';
  if (!Array.isArray(value) || value.length === 0) invalid(f, value, fix);
  if (value.length > AUTOPAUSE_LIMITS.commandArgs)
    invalid(f, value, `${fix}; at most ${AUTOPAUSE_LIMITS.commandArgs} arguments`);
  for (let i = 0; i < value.length; i++) {
    const a: unknown = value[i];
    if (typeof a !== "string") invalid(f, value, fix);
    if (a.length > AUTOPAUSE_LIMITS.argChars)
      invalid(
        `${f}[${i}]`,
        a,
        `at most ${AUTOPAUSE_LIMITS.argChars} characters per argument; put a longer script in a file in the sandbox`,
      );
    // the kernel ends an argument at NUL: such a probe could never run as written
    if (a.includes("\u0000")) invalid(`${f}[${i}]`, a, "must not contain NUL bytes (\\u0000)");
  }
  return [...value];
}

function wholeSeconds(f: string, value: unknown, dflt: number): number {
  if (value === undefined) return dflt;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > AUTOPAUSE_LIMITS.periodSeconds) {
    invalid(f, value, `use a whole number of seconds, at least 1 and at most ${AUTOPAUSE_LIMITS.periodSeconds}`);
  }
  return value;
}

type PauseRules = Pick<AutoPausePolicy, "idle" | "inactivityMs" | "pauseTime">;

function validatePause(f: string, value: unknown, ref: ProbeRef): PauseRules {
  const pause = strictObject(f, value, KEYS.pause, leaveOut(f));
  const out: PauseRules = {};
  if (has(pause, "whenProbedIdle")) {
    const g = `${f}.whenProbedIdle`;
    const idle = strictObject(g, own(pause, "whenProbedIdle"), KEYS.idle, leaveOut(g));
    const probe = ref(`${g}.probe`, own(idle, "probe"));
    const messageRegex = compileTenantPattern(`${g}.messageRegex`, own(idle, "messageRegex"));
    if (!has(idle, "thresholdDuration"))
      invalid(
        `${g}.thresholdDuration`,
        undefined,
        "required: how long the probe must report idle (0 = pause at the first idle report)",
      );
    out.idle = {
      probe,
      messageRegex,
      thresholdMs: parseDuration(`${g}.thresholdDuration`, own(idle, "thresholdDuration")),
    };
  }
  if (has(pause, "afterInactivity")) {
    const v = own(pause, "afterInactivity");
    const ms = parseDuration(`${f}.afterInactivity`, v);
    if (ms <= 0)
      invalid(`${f}.afterInactivity`, v, "use a positive duration, or leave it out to never pause on inactivity");
    out.inactivityMs = ms;
  }
  if (has(pause, "pauseTime")) {
    const v = own(pause, "pauseTime");
    const t = typeof v === "string" && v.length <= AUTOPAUSE_LIMITS.pauseTimeChars ? parseDatetime(v) : undefined;
    if (!t)
      invalid(
        `${f}.pauseTime`,
        v,
        "use an RFC3339 time with a zone, e.g. 2026-09-04T10:00:00Z or 2026-09-04T18:00:00+08:00",
      );
    out.pauseTime = t;
  }
  return out;
}

function validateSchedule(f: string, value: unknown, ref: ProbeRef): NonNullable<AutoPausePolicy["schedule"]> {
  const sched = strictObject(f, value, KEYS.schedule, leaveOut(f));
  const probe = ref(`${f}.probe`, own(sched, "probe"));
  const given = own(sched, "timeFormat");
  const timeFormat = given === undefined ? "unix" : given;
  if (timeFormat !== "unix" && timeFormat !== "datetime")
    invalid(`${f}.timeFormat`, timeFormat, 'use "unix" (seconds, positive integer) or "datetime" (RFC3339 with zone)');
  const lead = own(sched, "leadTime");
  return { probe, timeFormat, leadMs: lead === undefined ? DEFAULT_LEAD_MS : parseDuration(`${f}.leadTime`, lead) };
}

function validateTimeout(f: string, value: unknown): NonNullable<AutoPausePolicy["timeout"]> {
  const t: Doc = strictObject(f, value, KEYS.timeout, leaveOut(f));
  const after = own(t, "after");
  const afterMs = parseDuration(`${f}.after`, after);
  if (afterMs <= 0) invalid(`${f}.after`, after, "use a positive duration");
  const action = own(t, "action");
  if (action !== "pause" && action !== "kill")
    invalid(`${f}.action`, action, `use "pause" or "kill"${action === undefined ? " (required)" : ""}`);
  return { afterMs, action };
}
