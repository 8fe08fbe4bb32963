import { describe, expect, it } from "vitest";
import { ConflictError, SandboxFailedError } from "../core/errors.ts";
import type { Sandbox, SandboxPhase } from "../core/types.ts";
import { decideAccept, decideExecPod } from "./decideAccess.ts";
import type { SandboxResource } from "./resource.ts";

function cr(over: { owner?: string; clientKey?: string; podName?: string } = {}): SandboxResource {
  return {
    apiVersion: "sbx.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name: "sbx-a1" },
    spec: {
      owner: over.owner ?? "alice",
      ...(over.clientKey ? { clientKey: over.clientKey } : {}),
      ...(over.podName ? { podName: over.podName } : {}),
    } as SandboxResource["spec"],
  };
}

const sb = (phase: SandboxPhase, ready: boolean, reason?: string): Sandbox =>
  ({
    id: "sbx-a1",
    owner: "alice",
    profile: "base",
    size: "nano",
    phase,
    ready,
    reason,
    createdAt: "",
    expiresAt: "",
    metadata: {},
    cpuRequestMillis: 0,
    memoryRequestBytes: 0,
  }) as Sandbox;

describe("decideAccept", () => {
  it.each<
    [string, SandboxResource | undefined, { owner: string; clientKey?: string }, "new" | "existing" | "conflict"]
  >([
    ["nothing under the id", undefined, { owner: "alice", clientKey: "k1" }, "new"],
    ["same owner, same clientKey: a retry", cr({ clientKey: "k1" }), { owner: "alice", clientKey: "k1" }, "existing"],
    ["same owner, another clientKey", cr({ clientKey: "k1" }), { owner: "alice", clientKey: "k2" }, "conflict"],
    ["same owner, no clientKey on either", cr(), { owner: "alice" }, "conflict"],
    ["another owner, same clientKey", cr({ clientKey: "k1" }), { owner: "bob", clientKey: "k1" }, "conflict"],
  ])("%s", (_name, existing, spec, want) => {
    const run = () => decideAccept(existing, { id: "sbx-a1", ...spec });
    if (want !== "conflict") return void expect(run()).toBe(want);
    expect(run).toThrow(ConflictError);
    expect(run).toThrow("sandbox sbx-a1 already exists; retry with the same clientKey to get it back, or use a new id");
  });
});

describe("decideExecPod", () => {
  it("a ready sandbox runs in its recorded pod, else the pod named after it", () => {
    expect(decideExecPod("sbx-a1", cr({ podName: "warm-x1" }), sb("Running", true))).toBe("warm-x1");
    expect(decideExecPod("sbx-a1", cr(), sb("Running", true))).toBe("sbx-a1");
  });

  it.each<[string, Sandbox | undefined, string]>([
    ["failed", sb("Failed", false, "OOMKilled"), "SandboxFailedError"],
    ["succeeded", sb("Succeeded", false), "SandboxFailedError"],
    ["pending", sb("Pending", false), "sandbox sbx-a1 is not ready (phase Pending); wait for it first"],
    ["running, not ready yet", sb("Running", false), "sandbox sbx-a1 is not ready (phase Running); wait for it first"],
    ["unknown to the index", undefined, "sandbox sbx-a1 is not ready (phase unknown); wait for it first"],
  ])("%s is refused", (_name, s, want) => {
    const err = (() => {
      try {
        decideExecPod("sbx-a1", cr(), s);
      } catch (e) {
        return e;
      }
    })();
    if (want === "SandboxFailedError") expect(err).toBeInstanceOf(SandboxFailedError);
    else {
      expect(err).toBeInstanceOf(ConflictError);
      expect((err as Error).message).toBe(want);
    }
  });
});
