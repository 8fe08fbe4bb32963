import { describe, expect, it } from "vitest";
import type { Sandbox, SandboxPhase } from "../core/types.ts";
import type { SandboxRecord } from "./records.ts";
import { planSlotRecovery, type SlotRecoveryPlan, shouldProbeSlot } from "./recoveryPlan.ts";

const NOW = new Date("2026-03-01T12:00:00Z");

function sandbox(phase: SandboxPhase, ready: boolean): Sandbox {
  return {
    id: "sbx-1",
    owner: "alice",
    profile: "base",
    size: "nano",
    phase,
    ready,
    createdAt: "2026-03-01T11:00:00.000Z",
    expiresAt: "2026-03-01T13:00:00.000Z",
    metadata: {},
    cpuRequestMillis: 100,
    memoryRequestBytes: 1 << 27,
  };
}

function record(sb?: Sandbox): SandboxRecord {
  return {
    version: 1,
    key: "s0123456789ab",
    uid: 100_000_000,
    image: { profile: "base", image: "host" },
    rootfs: "host",
    size: {} as never,
    env: {},
    ...(sb ? { sandbox: sb } : {}),
  };
}

const LOST = "the sandbox was not running when the local backend restarted; the workspace is kept until it is deleted";

// Every kind of slot a previous process can leave (no record, warm, each sandbox phase), alive or not.
const table: [string, SandboxRecord | undefined, boolean, SlotRecoveryPlan][] = [
  ["unreadable record", undefined, false, { action: "remove" }],
  ["warm slot, helper alive", record(), true, { action: "offer-to-pool" }],
  ["warm slot, helper gone", record(), false, { action: "destroy" }],
  ["running and ready, helper alive", record(sandbox("Running", true)), true, { action: "adopt" }],
  [
    "pending (crash before ready), helper alive",
    record(sandbox("Pending", false)),
    true,
    { action: "adopt", sandbox: { ...sandbox("Running", true), readyAt: NOW.toISOString() } },
  ],
  [
    "running, helper gone",
    record(sandbox("Running", true)),
    false,
    { action: "mark-lost", sandbox: { ...sandbox("Failed", false), reason: "Lost", message: LOST } },
  ],
  [
    "pending, helper gone",
    record(sandbox("Pending", false)),
    false,
    { action: "mark-lost", sandbox: { ...sandbox("Failed", false), reason: "Lost", message: LOST } },
  ],
  [
    "terminating, helper gone",
    record(sandbox("Terminating", false)),
    false,
    { action: "mark-lost", sandbox: { ...sandbox("Failed", false), reason: "Lost", message: LOST } },
  ],
  ["failed", record(sandbox("Failed", false)), false, { action: "keep-ended" }],
  ["succeeded", record(sandbox("Succeeded", false)), false, { action: "keep-ended" }],
];

describe("planSlotRecovery", () => {
  it.each(table)("%s", (_name, rec, alive, plan) => {
    expect(planSlotRecovery(rec, { alive }, NOW)).toEqual(plan);
  });

  it("never brings an ended sandbox back, even if something answers on its socket", () => {
    expect(planSlotRecovery(record(sandbox("Failed", false)), { alive: true }, NOW)).toEqual({ action: "keep-ended" });
  });
});

describe("shouldProbeSlot", () => {
  it.each<[string, SandboxRecord, boolean]>([
    ["warm slot", record(), true],
    ["running", record(sandbox("Running", true)), true],
    ["pending", record(sandbox("Pending", false)), true],
    ["failed", record(sandbox("Failed", false)), false],
    ["succeeded", record(sandbox("Succeeded", false)), false],
  ])("%s -> %s", (_name, rec, probe) => {
    expect(shouldProbeSlot(rec)).toBe(probe);
  });
});
