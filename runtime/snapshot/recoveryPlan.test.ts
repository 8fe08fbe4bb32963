import { describe, expect, it } from "vitest";
import type { Sandbox, SandboxPhase } from "../core/types.ts";
import type { SnapshotInfo, SnapshotRecord, SnapshotState } from "./record.ts";
import { computeAlive, planRecovery, type RecoveryObserved, type RecoveryPlan } from "./recoveryPlan.ts";

const NOW = new Date("2026-03-01T12:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();

function snapshot(tag: string): SnapshotInfo {
  return {
    repository: "sbx-snapshots",
    tag,
    ref: `r/sbx-snapshots@sha256:${tag}`,
    digest: `sha256:${tag}`,
    sizeBytes: 10,
    createdAt: ago(60_000),
    layers: [],
  };
}

const sandbox: Sandbox = {
  id: "sb-1",
  owner: "alice",
  profile: "base",
  size: "nano",
  phase: "Running",
  ready: true,
  createdAt: ago(3_600_000),
  expiresAt: ago(-3_600_000),
  metadata: {},
  cpuRequestMillis: 100,
  memoryRequestBytes: 1 << 27,
};

function record(state: SnapshotState, over: Partial<SnapshotRecord> = {}): SnapshotRecord {
  return {
    id: "sb-1",
    owner: "alice",
    state,
    generation: 2,
    spec: {
      id: "sb-1",
      owner: "alice",
      image: { profile: "base", image: "host" },
      size: {} as never,
      env: {},
      ttlSeconds: 3600,
      idleTimeoutSeconds: 0,
      metadata: {},
      createdAt: sandbox.createdAt,
    },
    sandbox,
    autoResume: true,
    updatedAt: ago(1000),
    ...over,
  };
}

const previous = snapshot("g1");
const pending = snapshot("g2");
const pendingTag = { tag: "sb-1-g2", startedAt: ago(5000) };

// Every state of the machine, crossed with what recovery can observe of it.
const table: [string, SnapshotRecord, RecoveryObserved, RecoveryPlan][] = [
  ["running: nothing to do", record("running"), {}, { action: "keep" }],
  [
    "pausing, compute alive, manifest half-written",
    record("pausing", { pending: pendingTag }),
    { livePhase: "Running", pendingManifest: { digest: "sha256:g2" } },
    { action: "back-to-running", deleteManifest: "sha256:g2" },
  ],
  [
    "pausing, compute alive (still Pending), no manifest yet",
    record("pausing", { pending: pendingTag }),
    { livePhase: "Pending" },
    { action: "back-to-running" },
  ],
  [
    "pausing, compute alive even with a verified pending snapshot",
    record("pausing", { pending: pendingTag }),
    { livePhase: "Running", pendingManifest: { digest: "sha256:g2" }, pendingSnapshot: pending },
    { action: "back-to-running", deleteManifest: "sha256:g2" },
  ],
  [
    "pausing, compute gone, pending snapshot verifies",
    record("pausing", { pending: pendingTag }),
    { pendingManifest: { digest: "sha256:g2" }, pendingSnapshot: pending },
    { action: "promote", snapshot: pending },
  ],
  [
    "pausing, compute reports Paused (released), pending snapshot verifies",
    record("pausing", { pending: pendingTag }),
    { livePhase: "Paused", pendingManifest: { digest: "sha256:g2" }, pendingSnapshot: pending },
    { action: "promote", snapshot: pending },
  ],
  [
    "pausing, compute failed, pending manifest incomplete, previous snapshot kept",
    record("pausing", { pending: pendingTag, snapshot: previous }),
    { livePhase: "Failed", pendingManifest: { digest: "sha256:g2" } },
    { action: "keep-previous" },
  ],
  [
    "pausing, compute gone, no manifest, previous snapshot kept",
    record("pausing", { pending: pendingTag, snapshot: previous }),
    {},
    { action: "keep-previous" },
  ],
  [
    "pausing, compute gone, no snapshot at all: data lost",
    record("pausing", { pending: pendingTag }),
    {},
    { action: "drop" },
  ],
  [
    "pausing, compute succeeded (exited), no snapshot: data lost",
    record("pausing", { pending: pendingTag }),
    { livePhase: "Succeeded" },
    { action: "drop" },
  ],
  [
    "paused, compute not yet released",
    record("paused", { snapshot: previous, computeReleased: false }),
    { livePhase: "Running" },
    { action: "release" },
  ],
  [
    "paused, computeReleased absent (older record)",
    record("paused", { snapshot: previous }),
    {},
    { action: "release" },
  ],
  [
    "paused and released: settled",
    record("paused", { snapshot: previous, computeReleased: true }),
    {},
    { action: "keep" },
  ],
  [
    "resuming: discard the half-restored compute",
    record("resuming", { snapshot: previous, computeReleased: true }),
    { livePhase: "Running" },
    { action: "discard-resume" },
  ],
];

describe("planRecovery: one process owns the store", () => {
  it.each(table)("%s", (_name, rec, observed, plan) => {
    expect(planRecovery(rec, observed, NOW)).toEqual(plan);
  });

  it("covers every state of the machine", () => {
    expect(new Set(table.map(([, r]) => r.state))).toEqual(
      new Set<SnapshotState>(["running", "pausing", "paused", "resuming"]),
    );
  });
});

describe("planRecovery: records shared by replicas", () => {
  const policy = { holder: "replica-a", inFlightGraceMs: 600_000 };
  it.each<[string, SnapshotRecord, RecoveryPlan["action"]]>([
    [
      "another replica's fresh pausing record is refused",
      record("pausing", { holder: "replica-b", updatedAt: ago(3000), pending: pendingTag }),
      "refuse",
    ],
    [
      "another replica's fresh resuming record is refused",
      record("resuming", { holder: "replica-b", updatedAt: ago(599_999), snapshot: previous }),
      "refuse",
    ],
    [
      "another replica's pausing record past the grace is recovered",
      record("pausing", { holder: "replica-b", updatedAt: ago(600_000), pending: pendingTag }),
      "drop",
    ],
    [
      "our own fresh resuming record is recovered",
      record("resuming", { holder: "replica-a", updatedAt: ago(1000), snapshot: previous }),
      "discard-resume",
    ],
    [
      "a record without a holder is recovered",
      record("resuming", { updatedAt: ago(1000), snapshot: previous }),
      "discard-resume",
    ],
    [
      "another replica's paused record is not in flight: released",
      record("paused", { holder: "replica-b", updatedAt: ago(1000), snapshot: previous }),
      "release",
    ],
  ])("%s", (_name, rec, action) => {
    expect(planRecovery(rec, {}, NOW, policy).action).toBe(action);
  });

  it("a refusal says who holds it, how long ago it moved, and the grace", () => {
    expect(planRecovery(record("pausing", { holder: "replica-b", updatedAt: ago(3000) }), {}, NOW, policy)).toEqual({
      action: "refuse",
      holder: "replica-b",
      ageMs: 3000,
      graceMs: 600_000,
    });
  });

  it("without a grace (one process owns the store) nobody else's record is refused", () => {
    expect(
      planRecovery(record("pausing", { holder: "replica-b", updatedAt: ago(0) }), {}, NOW, { holder: "replica-a" })
        .action,
    ).toBe("drop");
  });
});

describe("computeAlive", () => {
  it.each<[SandboxPhase | undefined, boolean]>([
    [undefined, false],
    ["Pending", true],
    ["Running", true],
    ["Pausing", true],
    ["Resuming", true],
    ["Terminating", true],
    ["Paused", false],
    ["Failed", false],
    ["Succeeded", false],
  ])("%s -> %s", (phase, alive) => {
    expect(computeAlive(phase)).toBe(alive);
  });
});
