import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { ANNOTATIONS, LABELS, POOL } from "../k8s/contract.ts";
import type { SandboxResource } from "../k8s/resource.ts";
import { deriveSandbox } from "../k8s/status.ts";
import { podWith, record, running, terminated } from "../k8s/testFixtures.ts";
import { planOrphans, planSandbox } from "./sandboxPlan.ts";

const now = new Date("2026-01-01T00:02:00Z");
const owned = (p: V1Pod): V1Pod => ({
  ...p,
  metadata: {
    ...p.metadata,
    ownerReferences: [{ apiVersion: "sbx.dev/v1alpha1", kind: "Sandbox", name: "sb-1", uid: "uid-1" }],
  },
});

function plan(cr: SandboxResource, pod?: V1Pod, extra: Partial<Parameters<typeof planSandbox>[0]> = {}) {
  const credentials = extra.credentials ?? { enabled: false, refreshMarginMs: 60_000 };
  return planSandbox({
    cr,
    pod,
    strayPods: [],
    derived: deriveSandbox(cr, pod, { credentialsRequired: credentials.enabled }),
    now,
    credentials,
    ...extra,
  });
}
const kinds = (p: ReturnType<typeof plan>) => p.actions.map((a) => a.kind);

describe("planSandbox", () => {
  it("creates the pod of a new cold sandbox", () => {
    expect(kinds(plan(record()))).toEqual(["createPod"]);
  });
  it("does not create a pod for a warm sandbox: its pod is the claimed one", () => {
    const cr = record();
    cr.spec.podName = "warm-base-nano-abc";
    expect(kinds(plan(cr))).toEqual(["verifyPodGone"]);
  });
  it.each([
    ["gone", ["deleteSandbox"]],
    ["present", []],
  ] as const)("a pod that vanished from the cache and is %s live", (live, want) => {
    const p = plan(record({ status: { podName: "sb-1", phase: "Running" } }), undefined, { podLive: live });
    expect(kinds(p)).toEqual(want);
    if (live === "present") expect(p.requeueAfterMs).toBe(1000);
  });
  it("does nothing while being deleted", () => {
    expect(
      kinds(plan(record({ metadata: { ...record().metadata, deletionTimestamp: now.toISOString() } }), running(true))),
    ).toEqual([]);
  });
  it("does not recreate the pod of a sandbox that failed before it had one (quota)", () => {
    expect(kinds(plan(record({ status: { phase: "Failed", reason: "QuotaExceeded" } })))).toEqual([]);
  });
  it("adopts an unowned pod and records status", () => {
    const p = plan(record(), running(true));
    expect(kinds(p)).toEqual(["adoptPod", "writeStatus"]);
  });
  it("does not spend a write on a fresh pod's Pending", () => {
    expect(kinds(plan(record(), owned(podWith({ phase: "Pending" }))))).toEqual([]);
  });
  it("writes nothing when the recorded status is current", () => {
    const cr = record();
    const first = plan(cr, owned(running(true))).actions.find((a) => a.kind === "writeStatus");
    const again = plan(record({ status: first!.kind === "writeStatus" ? first!.status : {} }), owned(running(true)));
    expect(kinds(again)).toEqual([]);
  });
  it("records OOMKilled as Failed even while the pod phase is Running", () => {
    const p = plan(record({ status: { phase: "Running", podName: "sb-1" } }), owned(terminated(137, "OOMKilled")));
    expect(p.actions).toEqual([
      { kind: "writeStatus", status: expect.objectContaining({ phase: "Failed", reason: "OOMKilled", exitCode: 137 }) },
    ]);
  });
  describe("credentials", () => {
    const on = { enabled: true, refreshMarginMs: 60_000 };
    it("delivers them once the pod is ready", () => {
      expect(
        kinds(
          plan(record({ status: { phase: "Pending", podName: "sb-1" } }), owned(running(true)), { credentials: on }),
        ),
      ).toContain("deliverCredentials");
    });
    it("waits for the pod to be ready first", () => {
      expect(kinds(plan(record(), owned(running(false)), { credentials: on }))).not.toContain("deliverCredentials");
    });
    it("refreshes them a margin before expiry, and requeues for that moment", () => {
      const fresh = plan(record({ status: { credentialsExpiresAt: "2026-01-01T00:10:00Z" } }), owned(running(true)), {
        credentials: on,
      });
      expect(kinds(fresh)).not.toContain("deliverCredentials");
      expect(fresh.requeueAfterMs).toBe(7 * 60_000);
      const due = plan(record({ status: { credentialsExpiresAt: "2026-01-01T00:02:30Z" } }), owned(running(true)), {
        credentials: on,
      });
      expect(kinds(due)).toContain("deliverCredentials");
    });
  });
  it("deletes stray pods carrying its label", () => {
    const stray = podWith({ phase: "Running" }, { name: "warm-x" });
    expect(plan(record(), owned(running(true)), { strayPods: [stray] }).actions[0]).toEqual({
      kind: "deletePod",
      podName: "warm-x",
      why: expect.any(String),
    });
  });
});

describe("planOrphans", () => {
  const claimed = (at: string) =>
    podWith(
      { phase: "Running" },
      {
        name: "warm-1",
        labels: { [LABELS.pool]: POOL.claimed, [LABELS.sandbox]: "sb-9" },
        annotations: { [ANNOTATIONS.claimedAt]: at },
        creationTimestamp: new Date("2025-12-31T00:00:00Z"),
      },
    );
  it("waits out the grace of a fresh claim (the record may be on its way)", () => {
    const p = planOrphans({ pods: [claimed("2026-01-01T00:01:50Z")], now, graceMs: 30_000 });
    expect(p.actions).toEqual([]);
    expect(p.requeueAfterMs).toBe(20_000);
  });
  it("deletes an orphan past the grace", () => {
    expect(planOrphans({ pods: [claimed("2026-01-01T00:01:00Z")], now, graceMs: 30_000 }).actions).toEqual([
      { kind: "deletePod", podName: "warm-1", why: "its sandbox record does not exist" },
    ]);
  });
});
