import { describe, expect, it } from "vitest";
import { ManualClock } from "./clock.ts";
import { planReap, type ReapConfig } from "./reaper.ts";
import type { Sandbox } from "./types.ts";

const cfg: ReapConfig = { idleTimeoutSeconds: 900, finishedGraceSeconds: 60 };
const start = Date.UTC(2026, 0, 1);
const at = (s: number) => new Date(start + s * 1000).toISOString();

function sb(over: Partial<Sandbox>): Sandbox {
  return {
    id: "s1",
    owner: "alice",
    profile: "base",
    size: "nano",
    phase: "Running",
    ready: true,
    createdAt: at(0),
    readyAt: at(1),
    expiresAt: at(3600),
    metadata: {},
    cpuRequestMillis: 100,
    memoryRequestBytes: 1,
    ...over,
  };
}

describe("planReap", () => {
  it.each([
    { name: "fresh running sandbox is kept", s: sb({}), after: 10, want: [] },
    { name: "hard TTL reached", s: sb({}), after: 3600, want: ["ttl"] },
    { name: "TTL wins over idle", s: sb({ lastActivityAt: at(0) }), after: 3601, want: ["ttl"] },
    { name: "idle past the default timeout", s: sb({ lastActivityAt: at(100) }), after: 1000, want: ["idle"] },
    { name: "idle not yet", s: sb({ lastActivityAt: at(100) }), after: 999, want: [] },
    { name: "no activity falls back to readyAt", s: sb({ readyAt: at(5) }), after: 905, want: ["idle"] },
    {
      name: "no activity nor readyAt falls back to createdAt",
      s: sb({ readyAt: undefined, phase: "Pending", ready: false }),
      after: 900,
      want: ["idle"],
    },
    {
      name: "per-sandbox idle timeout overrides the default",
      s: sb({ idleTimeoutSeconds: 30, lastActivityAt: at(10) }),
      after: 40,
      want: ["idle"],
    },
    { name: "idle timeout 0 means never", s: sb({ idleTimeoutSeconds: 0 }), after: 3000, want: [] },
    {
      name: "finished with finishedAt within grace",
      s: sb({ phase: "Failed", reason: "OOMKilled", finishedAt: at(100) }),
      after: 159,
      want: [],
    },
    {
      name: "finished with finishedAt past grace",
      s: sb({ phase: "Succeeded", finishedAt: at(100) }),
      after: 160,
      want: ["finished"],
    },
    {
      name: "finished without finishedAt nor first-seen is reaped",
      s: sb({ phase: "Failed" }),
      after: 1,
      want: ["finished"],
    },
    {
      name: "paused sandboxes do not idle out",
      s: sb({ phase: "Paused", lastActivityAt: at(0) }),
      after: 3000,
      want: [],
    },
    { name: "paused sandboxes still hit the hard TTL", s: sb({ phase: "Paused" }), after: 3600, want: ["ttl"] },
    { name: "terminating is left to the kill in progress", s: sb({ phase: "Terminating" }), after: 99999, want: [] },
    { name: "pausing is left to the snapshot", s: sb({ phase: "Pausing" }), after: 99999, want: [] },
  ])("$name", ({ s, after, want }) => {
    const clock = new ManualClock(start + after * 1000);
    expect(planReap([s], clock.now(), cfg).map((a) => a.reason)).toEqual(want);
  });

  it("uses when the reaper first saw a terminal sandbox when it carries no finishedAt", async () => {
    const clock = new ManualClock(start);
    const failed = sb({ id: "f", phase: "Failed" });
    const seen = new Map([["f", clock.now()]]);
    expect(planReap([failed], clock.now(), cfg, seen)).toEqual([]);
    await clock.advance(59_000);
    expect(planReap([failed], clock.now(), cfg, seen)).toEqual([]);
    await clock.advance(1_000);
    expect(planReap([failed], clock.now(), cfg, seen)).toEqual([{ id: "f", owner: "alice", reason: "finished" }]);
  });

  it("plans each sandbox independently", () => {
    const now = new Date(start + 2000 * 1000);
    const plan = planReap(
      [
        sb({ id: "a", lastActivityAt: at(1500) }),
        sb({ id: "b", lastActivityAt: at(10) }),
        sb({ id: "c", owner: "bob", expiresAt: at(1999) }),
      ],
      now,
      cfg,
    );
    expect(plan).toEqual([
      { id: "b", owner: "alice", reason: "idle" },
      { id: "c", owner: "bob", reason: "ttl" },
    ]);
  });
});
