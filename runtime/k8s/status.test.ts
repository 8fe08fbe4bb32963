import { describe, expect, it } from "vitest";
import { ANNOTATIONS } from "./contract.ts";
import { deriveSandbox, observePod, planRecordedStatus } from "./status.ts";
import { podWith, record, running, terminated, waiting } from "./testFixtures.ts";

describe("observePod: status truth", () => {
  it.each([
    [
      "OOMKilled while the phase still says Running",
      terminated(137, "OOMKilled"),
      { phase: "Failed", reason: "OOMKilled", exitCode: 137 },
    ],
    ["non-zero exit while Running", terminated(3, "Error"), { phase: "Failed", reason: "Error", exitCode: 3 }],
    ["non-zero exit without a reason", terminated(1), { phase: "Failed", reason: "Error", exitCode: 1 }],
    ["clean exit", terminated(0, "Completed"), { phase: "Succeeded", exitCode: 0 }],
    [
      "deadline exceeded",
      podWith({
        phase: "Failed",
        reason: "DeadlineExceeded",
        message: "Pod was active on the node longer than the specified deadline",
      }),
      { phase: "Failed", reason: "DeadlineExceeded" },
    ],
    ["evicted", podWith({ phase: "Failed", reason: "Evicted" }), { phase: "Failed", reason: "Evicted" }],
    ["running and ready", running(true), { phase: "Running", ready: true, readyAt: "2026-01-01T00:00:05.000Z" }],
    ["running, not ready", running(false), { phase: "Running", ready: false }],
    ["pulling", waiting("ContainerCreating"), { phase: "Pending", reason: "ContainerCreating" }],
    ["bad image name is permanent", waiting("InvalidImageName"), { phase: "Failed", reason: "InvalidImageName" }],
    [
      "unschedulable",
      podWith({
        phase: "Pending",
        conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message: "0/3 nodes" }],
      }),
      { phase: "Pending", reason: "Unschedulable", message: "0/3 nodes" },
    ],
    ["being deleted", podWith({ phase: "Running" }, { deletionTimestamp: new Date() }), { phase: "Terminating" }],
  ])("%s", (_n, pod, want) => {
    expect(observePod(pod)).toMatchObject(want);
  });
});

describe("deriveSandbox", () => {
  const off = { credentialsRequired: false };
  it("is Pending before its pod exists", () => {
    expect(deriveSandbox(record(), undefined, off)).toMatchObject({
      id: "sb-1",
      owner: "alice",
      phase: "Pending",
      ready: false,
      cpuRequestMillis: 100,
      memoryRequestBytes: 128 * 2 ** 20,
      expiresAt: "2026-01-01T00:01:00.000Z",
    });
  });
  it("reads as going away when its pod vanished", () => {
    expect(deriveSandbox(record({ status: { podName: "sb-1", phase: "Running" } }), undefined, off).phase).toBe(
      "Terminating",
    );
  });
  it("keeps a recorded terminal status even when the pod is gone", () => {
    const sb = deriveSandbox(
      record({ status: { phase: "Failed", reason: "OOMKilled", exitCode: 137, podName: "sb-1" } }),
      undefined,
      off,
    );
    expect(sb).toMatchObject({ phase: "Failed", reason: "OOMKilled", exitCode: 137, ready: false });
  });
  it("is ready only once credentials are inside when the broker is on", () => {
    expect(deriveSandbox(record(), running(true), { credentialsRequired: true })).toMatchObject({
      ready: false,
      reason: "DeliveringCredentials",
    });
    const withCreds = record({ status: { credentialsExpiresAt: "2026-01-01T01:00:00Z" } });
    expect(deriveSandbox(withCreds, running(true), { credentialsRequired: true }).ready).toBe(true);
    const warmCreds = record();
    warmCreds.metadata.annotations![ANNOTATIONS.credentialsExpiresAt] = "2026-01-01T01:00:00Z";
    expect(deriveSandbox(warmCreds, running(true), { credentialsRequired: true }).ready).toBe(true);
  });
  it("fails on OOM even though the pod phase is Running", () => {
    expect(deriveSandbox(record(), terminated(137, "OOMKilled"), off)).toMatchObject({
      phase: "Failed",
      reason: "OOMKilled",
      exitCode: 137,
      finishedAt: "2026-01-01T00:01:00.000Z",
    });
  });
  it("shows last activity from the annotation", () => {
    const cr = record();
    cr.metadata.annotations![ANNOTATIONS.lastActivity] = "2026-01-01T00:00:30.000Z";
    expect(deriveSandbox(cr, running(true), off).lastActivityAt).toBe("2026-01-01T00:00:30.000Z");
  });
});

describe("planRecordedStatus", () => {
  const now = new Date("2026-01-01T00:02:00Z");
  it("records ready time once and keeps it", () => {
    const sb = deriveSandbox(record(), running(true), { credentialsRequired: false });
    const s1 = planRecordedStatus({}, sb, "sb-1", now);
    expect(s1).toMatchObject({
      phase: "Running",
      podName: "sb-1",
      node: "kwok-1",
      readyAt: "2026-01-01T00:00:05.000Z",
    });
    expect(planRecordedStatus(s1, sb, "sb-1", new Date("2026-01-02T00:00:00Z"))).toEqual(s1);
  });
  it("records the terminal reason and finish time", () => {
    const sb = deriveSandbox(record(), terminated(137, "OOMKilled"), { credentialsRequired: false });
    expect(planRecordedStatus({ phase: "Running" }, sb, "sb-1", now)).toMatchObject({
      phase: "Failed",
      reason: "OOMKilled",
      exitCode: 137,
      finishedAt: "2026-01-01T00:01:00.000Z",
    });
  });
});
