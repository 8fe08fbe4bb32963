import { describe, expect, it } from "vitest";
import { type AutoPauseState, type Decision, decideAutoPause } from "./decide.ts";
import { applyProbeOutcome, dueProbes, nextProbeAt, type ProbeStatus } from "./probe.ts";
import { type AutoPauseInput, validateAutoPause } from "./spec.ts";

const T = (iso: string) => new Date(iso);
const created = T("2026-09-04T08:00:00Z");

function status(name: string, message: string, since: string, ok = true): ProbeStatus {
  return { name, ok, message, exitCode: ok ? 0 : 1, timedOut: false, lastProbeTime: since, lastTransitionTime: since };
}

const probes = [
  { name: "Active", command: ["sh", "-c", "echo inactive"], periodSeconds: 30, timeoutSeconds: 5 },
  { name: "Cron", command: ["sh", "-c", "echo none"], periodSeconds: 30, timeoutSeconds: 5 },
];
const idle10m: AutoPauseInput = {
  probes,
  pause: { whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: "10m" } },
};
const idleAndCron: AutoPauseInput = {
  ...idle10m,
  resume: { whenProbedSchedule: { probe: "Cron", timeFormat: "unix", leadTime: "5m" } },
};

function decide(input: AutoPauseInput, state: Partial<AutoPauseState>, now: string): Decision {
  return decideAutoPause(
    validateAutoPause(input),
    { phase: "running", createdAt: created, probes: {}, ...state },
    T(now),
  );
}

const iso = (d: Date | undefined) => d?.toISOString();

describe("decideAutoPause: pause when idle", () => {
  const idleSince10 = { probes: { Active: status("Active", "inactive", "2026-09-04T10:00:00Z") } };
  it.each([
    ["2026-09-04T10:00:00Z", "none"],
    ["2026-09-04T10:09:59Z", "none"],
    ["2026-09-04T10:10:00Z", "pause"],
  ])("idle since 10:00, threshold 10m, at %s -> %s", (now, action) => {
    const d = decide(idle10m, idleSince10, now);
    expect(d.action).toBe(action);
    if (action === "none")
      expect([iso(d.nextPauseTime), d.nextPauseReason, iso(d.recheckAt)]).toEqual([
        "2026-09-04T10:10:00.000Z",
        "probedIdle",
        "2026-09-04T10:10:00.000Z",
      ]);
    else expect(d.reason).toBe("probedIdle");
  });

  it("clears nextPauseTime when the probe reports active", () => {
    const d = decide(
      idle10m,
      { probes: { Active: status("Active", "active", "2026-09-04T10:05:00Z") } },
      "2026-09-04T10:30:00Z",
    );
    expect(d).toEqual({
      action: "none",
      nextResumeTime: undefined,
      nextPauseTime: undefined,
      nextPauseReason: undefined,
      recheckAt: undefined,
    });
  });

  it.each([
    ["failed", { ...status("Active", "inactive", "2026-09-04T10:00:00Z", false) }],
    ["timed out", { ...status("Active", "inactive", "2026-09-04T10:00:00Z", false), timedOut: true, exitCode: 124 }],
  ])("keeps running when the idle probe %s", (_n, s) => {
    expect(decide(idle10m, { probes: { Active: s } }, "2026-09-04T12:00:00Z").action).toBe("none");
  });

  it("thresholdDuration 0 pauses at the first idle report", () => {
    const input: AutoPauseInput = {
      probes,
      pause: { whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: 0 } },
    };
    expect(decide(input, idleSince10, "2026-09-04T10:00:00Z")).toMatchObject({ action: "pause", reason: "probedIdle" });
  });

  it("restarts the idle timer when the report changes (lastTransitionTime)", () => {
    let s = applyProbeOutcome(
      undefined,
      "Active",
      { ok: true, stdout: "inactive\n", exitCode: 0, timedOut: false },
      T("2026-09-04T10:00:00Z"),
    );
    s = applyProbeOutcome(
      s,
      "Active",
      { ok: true, stdout: "inactive", exitCode: 0, timedOut: false },
      T("2026-09-04T10:05:00Z"),
    );
    expect(s.lastTransitionTime).toBe("2026-09-04T10:00:00.000Z");
    s = applyProbeOutcome(
      s,
      "Active",
      { ok: true, stdout: "active", exitCode: 0, timedOut: false },
      T("2026-09-04T10:06:00Z"),
    );
    s = applyProbeOutcome(
      s,
      "Active",
      { ok: true, stdout: "inactive", exitCode: 0, timedOut: false },
      T("2026-09-04T10:07:00Z"),
    );
    expect(iso(decide(idle10m, { probes: { Active: s } }, "2026-09-04T10:07:00Z").nextPauseTime)).toBe(
      "2026-09-04T10:17:00.000Z",
    );
  });
});

describe("decideAutoPause: wake before scheduled work", () => {
  const cron = (msg: string, ok = true) => status("Cron", msg, "2026-09-04T09:50:00Z", ok);
  it("records nextResumeTime = task - leadTime (1788516000 = 10:00Z)", () => {
    const d = decide(
      idleAndCron,
      { probes: { Cron: cron("1788516000"), Active: status("Active", "active", "2026-09-04T09:50:00Z") } },
      "2026-09-04T09:50:00Z",
    );
    expect(iso(d.nextResumeTime)).toBe("2026-09-04T09:55:00.000Z");
  });

  it.each(["none", "1788516000000", "10:00", "1788516000 # next"])(
    "unparseable %j: no schedule, idle may still pause",
    (msg) => {
      const d = decide(
        idleAndCron,
        { probes: { Cron: cron(msg), Active: status("Active", "inactive", "2026-09-04T09:00:00Z") } },
        "2026-09-04T09:50:00Z",
      );
      expect(d).toMatchObject({ action: "pause", reason: "probedIdle", nextResumeTime: undefined });
    },
  );

  it.each([
    ["failed", { Cron: cron("1788516000", false) }],
    ["not yet reported", {}],
  ])("schedule probe %s: no schedule and no probe-driven pause", (_n, extra) => {
    const d = decide(
      idleAndCron,
      { probes: { ...extra, Active: status("Active", "inactive", "2026-09-04T09:00:00Z") } },
      "2026-09-04T09:50:00Z",
    );
    expect(d).toMatchObject({ action: "none", nextResumeTime: undefined, nextPauseTime: undefined });
  });

  it.each([
    ["2026-09-04T09:54:59Z", "none"],
    ["2026-09-04T09:55:00Z", "resume"],
  ])("paused with nextResumeTime 09:55, at %s -> %s", (now, action) => {
    const d = decide(idleAndCron, { phase: "paused", nextResumeTime: T("2026-09-04T09:55:00Z") }, now);
    expect(d.action).toBe(action);
    if (action === "none") expect(iso(d.recheckAt)).toBe("2026-09-04T09:55:00.000Z");
    else expect(d.reason).toBe("probedSchedule");
  });

  it("a paused sandbox without a schedule stays paused", () => {
    expect(decide(idleAndCron, { phase: "paused" }, "2026-09-05T00:00:00Z")).toEqual({
      action: "none",
      nextResumeTime: undefined,
      recheckAt: undefined,
    });
  });

  it("after a scheduled wake, idle does not pause again before the task", () => {
    const state = {
      resumedAt: T("2026-09-04T09:55:00Z"),
      probes: { Cron: cron("1788516000"), Active: status("Active", "inactive", "2026-09-04T09:55:00Z") },
    };
    const input: AutoPauseInput = {
      ...idleAndCron,
      pause: {
        whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: 0 },
        afterInactivity: "1m",
      },
    };
    const d = decide(input, state, "2026-09-04T09:58:00Z");
    expect(d).toMatchObject({ action: "none", nextPauseTime: undefined });
    expect(iso(d.recheckAt)).toBe("2026-09-04T10:00:00.000Z");
    // once the task time passed, the stale schedule is ignored and idle pauses again
    expect(decide(input, state, "2026-09-04T10:00:00Z")).toMatchObject({
      action: "pause",
      reason: "probedIdle",
      nextResumeTime: undefined,
    });
  });
});

describe("decideAutoPause: pauseTime, timeout, inactivity", () => {
  it("an expired pauseTime pauses even while the probe reports active", () => {
    const input: AutoPauseInput = { ...idle10m, pause: { ...idle10m.pause, pauseTime: "2026-09-04T12:00:00+02:00" } };
    const active = { probes: { Active: status("Active", "active", "2026-09-04T09:00:00Z") } };
    expect(decide(input, active, "2026-09-04T09:59:59Z")).toMatchObject({
      action: "none",
      nextPauseReason: "pauseTime",
    });
    expect(decide(input, active, "2026-09-04T10:00:00Z")).toMatchObject({ action: "pause", reason: "pauseTime" });
  });

  it("timeout with action pause counts from creation and re-arms at every wake", () => {
    const input: AutoPauseInput = { timeout: { after: "10m", action: "pause" } };
    expect(decide(input, {}, "2026-09-04T08:09:59Z")).toMatchObject({ action: "none", nextPauseReason: "timeout" });
    expect(decide(input, {}, "2026-09-04T08:10:00Z")).toMatchObject({ action: "pause", reason: "timeout" });
    expect(
      decide(input, { resumedAt: T("2026-09-04T09:00:00Z") }, "2026-09-04T09:05:00Z").nextPauseTime?.toISOString(),
    ).toBe("2026-09-04T09:10:00.000Z");
  });

  it("timeout with action kill kills, also while paused", () => {
    const input: AutoPauseInput = { timeout: { after: "1h", action: "kill" } };
    expect(decide(input, {}, "2026-09-04T08:59:59Z")).toMatchObject({
      action: "none",
      recheckAt: T("2026-09-04T09:00:00Z"),
    });
    expect(decide(input, {}, "2026-09-04T09:00:00Z")).toEqual({ action: "kill", reason: "timeout" });
    expect(decide(input, { phase: "paused" }, "2026-09-04T09:00:00Z")).toEqual({ action: "kill", reason: "timeout" });
  });

  it("pauses after N minutes without API activity", () => {
    const input: AutoPauseInput = { pause: { afterInactivity: "15m" } };
    const state = { lastActivityAt: T("2026-09-04T09:00:00Z") };
    expect(decide(input, state, "2026-09-04T09:14:59Z")).toMatchObject({
      action: "none",
      nextPauseReason: "inactivity",
      nextPauseTime: T("2026-09-04T09:15:00Z"),
    });
    expect(decide(input, state, "2026-09-04T09:15:00Z")).toMatchObject({ action: "pause", reason: "inactivity" });
  });

  it("the earliest rule wins and is named", () => {
    const input: AutoPauseInput = { ...idle10m, pause: { ...idle10m.pause, afterInactivity: "5m" } };
    const d = decide(
      input,
      {
        lastActivityAt: T("2026-09-04T10:01:00Z"),
        probes: { Active: status("Active", "inactive", "2026-09-04T10:00:00Z") },
      },
      "2026-09-04T10:02:00Z",
    );
    expect(d).toMatchObject({
      action: "none",
      nextPauseReason: "inactivity",
      nextPauseTime: T("2026-09-04T10:06:00Z"),
    });
  });
});

describe("probe scheduling", () => {
  const specs = validateAutoPause({ probes }).probes;
  it("runs never-run probes now and others after their period", () => {
    const now = T("2026-09-04T10:00:30Z");
    expect(dueProbes(specs, {}, now).map((p) => p.name)).toEqual(["Active", "Cron"]);
    const st = {
      Active: status("Active", "x", "2026-09-04T10:00:00Z"),
      Cron: status("Cron", "x", "2026-09-04T10:00:10Z"),
    };
    expect(dueProbes(specs, st, now).map((p) => p.name)).toEqual(["Active"]);
    expect(nextProbeAt(specs, st, T("2026-09-04T10:00:05Z"))?.toISOString()).toBe("2026-09-04T10:00:30.000Z");
  });
});
