import { describe, expect, it } from "vitest";
import { parseDuration } from "./duration.ts";
import { parseDatetime, parseScheduleTime, parseUnixSeconds } from "./schedule.ts";
import { type AutoPauseInput, DEFAULT_LEAD_MS, validateAutoPause } from "./spec.ts";

const probe = { name: "Active", command: ["sh", "-c", "echo inactive"], periodSeconds: 30, timeoutSeconds: 5 };

describe("parseDuration", () => {
  it.each([
    ["0", 0],
    [0, 0],
    ["30s", 30_000],
    ["10m", 600_000],
    ["1h30m", 5_400_000],
    ["250ms", 250],
    [90, 90_000],
    [" 5m ", 300_000],
  ])("%j -> %d ms", (v, ms) => expect(parseDuration("f", v)).toBe(ms));
  it.each(["-5m", "5", "5 m", "1d", "", "m", -1, Number.NaN, null, {}])("%j is rejected naming the field", (v) =>
    expect(() => parseDuration("autoPause.x", v)).toThrow(
      /^autoPause\.x: invalid value .*duration like 30s, 10m, 1h30m/,
    ),
  );
});

describe("schedule time parsing", () => {
  it.each([
    ["1788516000", "2026-09-04T10:00:00.000Z"],
    [" 1788516000\n", "2026-09-04T10:00:00.000Z"],
  ])("unix %j", (v, iso) => expect(parseUnixSeconds(v)?.toISOString()).toBe(iso));
  it.each([
    "1788516000000x",
    "1788516000.5",
    "0",
    "-1788516000",
    "none",
    "",
    "17885 16000",
    '{"t":1}',
    "1788516000s",
    "1788516000000000",
  ])("unix %j is no schedule", (v) => expect(parseUnixSeconds(v)).toBeUndefined());
  it.each([
    ["2026-09-04T18:00:00+08:00", "2026-09-04T10:00:00.000Z"],
    ["2026-09-04T10:00:00Z", "2026-09-04T10:00:00.000Z"],
    ["2026-09-04t10:00:00.250z", "2026-09-04T10:00:00.250Z"],
    ["2026-09-04T05:30:00-04:30", "2026-09-04T10:00:00.000Z"],
  ])("datetime %j", (v, iso) => expect(parseDatetime(v)?.toISOString()).toBe(iso));
  it.each([
    "2026-09-04 18:00:00",
    "2026-09-04T18:00:00",
    "2026-02-31T10:00:00Z",
    "2026-13-01T00:00:00Z",
    "1788516000",
    "tomorrow",
  ])("datetime %j is no schedule", (v) => expect(parseDatetime(v)).toBeUndefined());
  it("dispatches on the format", () => {
    expect(parseScheduleTime("1788516000", "datetime")).toBeUndefined();
    expect(parseScheduleTime("2026-09-04T10:00:00Z", "unix")).toBeUndefined();
  });
});

describe("validateAutoPause", () => {
  it("normalizes a full spec and applies defaults", () => {
    const input: AutoPauseInput = {
      probes: [probe, { name: "Cron", command: ["cron-next"] }],
      pause: {
        whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: "10m" },
        afterInactivity: "30m",
        pauseTime: "2026-09-04T18:00:00+08:00",
      },
      resume: { whenProbedSchedule: { probe: "Cron" } },
      timeout: { after: 600, action: "pause" },
    };
    const copy = structuredClone(input);
    const p = validateAutoPause(input);
    expect(input).toEqual(copy);
    expect(p.probes).toEqual([
      { name: "Active", command: probe.command, periodMs: 30_000, timeoutMs: 5_000 },
      { name: "Cron", command: ["cron-next"], periodMs: 30_000, timeoutMs: 5_000 },
    ]);
    expect(p.idle).toEqual({ probe: "Active", messageRegex: /^inactive$/, thresholdMs: 600_000 });
    expect(p.inactivityMs).toBe(1_800_000);
    expect(p.pauseTime?.toISOString()).toBe("2026-09-04T10:00:00.000Z");
    expect(p.schedule).toEqual({ probe: "Cron", timeFormat: "unix", leadMs: DEFAULT_LEAD_MS });
    expect(p.timeout).toEqual({ afterMs: 600_000, action: "pause" });
  });

  it.each<[string, AutoPauseInput, RegExp]>([
    [
      "bad probe name",
      { probes: [{ ...probe, name: "9x" }] },
      /^autoPause\.probes\[0\]\.name: invalid value "9x": use 1-63 letters/,
    ],
    [
      "duplicate probe",
      { probes: [probe, probe] },
      /^autoPause\.probes\[1\]\.name: invalid value "Active": probe names must be unique/,
    ],
    [
      "empty command",
      { probes: [{ ...probe, command: [] }] },
      /^autoPause\.probes\[0\]\.command: invalid value \[\]: use a non-empty array/,
    ],
    [
      "zero period",
      { probes: [{ ...probe, periodSeconds: 0 }] },
      /^autoPause\.probes\[0\]\.periodSeconds: invalid value 0: use a whole number/,
    ],
    [
      "timeout over period",
      { probes: [{ ...probe, periodSeconds: 5, timeoutSeconds: 10 }] },
      /^autoPause\.probes\[0\]\.timeoutSeconds: invalid value 10: must not exceed periodSeconds \(5\)/,
    ],
    [
      "unknown idle probe",
      { probes: [probe], pause: { whenProbedIdle: { probe: "Idle", messageRegex: "x", thresholdDuration: 0 } } },
      /^autoPause\.pause\.whenProbedIdle\.probe: invalid value "Idle": reference a probe defined under autoPause\.probes \(one of: Active\)/,
    ],
    [
      "bad regex",
      { probes: [probe], pause: { whenProbedIdle: { probe: "Active", messageRegex: "(", thresholdDuration: 0 } } },
      /^autoPause\.pause\.whenProbedIdle\.messageRegex: invalid value "\(": use a non-empty JavaScript regular expression/,
    ],
    [
      "missing threshold",
      { probes: [probe], pause: { whenProbedIdle: { probe: "Active", messageRegex: "x" } as never } },
      /^autoPause\.pause\.whenProbedIdle\.thresholdDuration: invalid value undefined: required/,
    ],
    [
      "negative threshold",
      { probes: [probe], pause: { whenProbedIdle: { probe: "Active", messageRegex: "x", thresholdDuration: "-1m" } } },
      /^autoPause\.pause\.whenProbedIdle\.thresholdDuration: invalid value "-1m"/,
    ],
    [
      "zero inactivity",
      { pause: { afterInactivity: 0 } },
      /^autoPause\.pause\.afterInactivity: invalid value 0: use a positive duration/,
    ],
    [
      "pauseTime without zone",
      { pause: { pauseTime: "2026-09-04 18:00:00" } },
      /^autoPause\.pause\.pauseTime: invalid value "2026-09-04 18:00:00": use an RFC3339 time with a zone/,
    ],
    [
      "schedule probe missing",
      { resume: { whenProbedSchedule: { probe: "Cron" } } },
      /^autoPause\.resume\.whenProbedSchedule\.probe: invalid value "Cron": .*none are defined/,
    ],
    [
      "bad time format",
      { probes: [probe], resume: { whenProbedSchedule: { probe: "Active", timeFormat: "ms" as never } } },
      /^autoPause\.resume\.whenProbedSchedule\.timeFormat: invalid value "ms": use "unix"/,
    ],
    [
      "negative lead",
      { probes: [probe], resume: { whenProbedSchedule: { probe: "Active", leadTime: -60 } } },
      /^autoPause\.resume\.whenProbedSchedule\.leadTime: invalid value -60/,
    ],
    [
      "bad timeout action",
      { timeout: { after: "10m", action: "stop" as never } },
      /^autoPause\.timeout\.action: invalid value "stop": use "pause" or "kill"/,
    ],
    [
      "zero timeout",
      { timeout: { after: 0, action: "kill" } },
      /^autoPause\.timeout\.after: invalid value 0: use a positive duration/,
    ],
  ])("%s", (_name, input, message) => expect(() => validateAutoPause(input)).toThrow(message));

  it("accepts leadTime 0 and thresholdDuration 0", () => {
    const p = validateAutoPause({
      probes: [probe],
      pause: { whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: 0 } },
      resume: { whenProbedSchedule: { probe: "Active", timeFormat: "datetime", leadTime: "0" } },
    });
    expect(p.idle?.thresholdMs).toBe(0);
    expect(p.schedule?.leadMs).toBe(0);
  });
});
