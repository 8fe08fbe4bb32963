import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "../config/schema.ts";
import type { SandboxSpec } from "../core/types.ts";
import { LABELS, ownerLabelValue, POOL, SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "./contract.ts";
import { planSandboxPod, planWarmPod, warmPodName } from "./podTemplate.ts";

const config = validateRuntimeConfig({ platform: "kubernetes", kubernetes: { namespace: "sbx-sandboxes" } });
const gvisor = validateRuntimeConfig({
  platform: "kubernetes",
  kubernetes: { namespace: "ns2", runtimeClassName: "gvisor" },
});
const userns = validateRuntimeConfig({ platform: "kubernetes", kubernetes: { userNamespaces: true } });

function spec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id: "sb-1",
    owner: "alice@example.com",
    image: { profile: "base", image: "registry.example/base:1" },
    size: config.sizeClasses.nano,
    env: { SECRET: "not-in-pod" },
    ttlSeconds: 600,
    idleTimeoutSeconds: 60,
    metadata: {},
    createdAt: new Date("2026-01-01T00:00:00Z"),
    ...over,
  };
}

describe("planSandboxPod", () => {
  const pod = planSandboxPod(spec(), config);
  const c = pod.spec!.containers[0];

  it.each([
    [
      "runs as a non-root uid",
      () => [pod.spec!.securityContext!.runAsNonRoot, pod.spec!.securityContext!.runAsUser],
      [true, 1000],
    ],
    ["has a read-only root filesystem", () => c.securityContext!.readOnlyRootFilesystem, true],
    ["drops every capability", () => c.securityContext!.capabilities!.drop, ["ALL"]],
    [
      "uses the RuntimeDefault seccomp profile",
      () => pod.spec!.securityContext!.seccompProfile!.type,
      "RuntimeDefault",
    ],
    ["gets no service account token", () => pod.spec!.automountServiceAccountToken, false],
    ["forbids privilege escalation", () => c.securityContext!.allowPrivilegeEscalation, false],
    ["sets the hard TTL as activeDeadlineSeconds", () => pod.spec!.activeDeadlineSeconds, 600],
    ["idles on sleep", () => c.command, ["sh", "-c", 'echo "sbx: sandbox started"; exec sleep infinity']],
    ["never restarts (a crash is a terminal status)", () => pod.spec!.restartPolicy, "Never"],
    ["requests the size class", () => c.resources!.requests, { cpu: "100m", memory: "128Mi" }],
    ["limits to the size class", () => c.resources!.limits, { cpu: "1", memory: "512Mi" }],
    ["selects sandbox nodes", () => pod.spec!.nodeSelector, { [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value }],
    [
      "tolerates the sandbox taint",
      () => pod.spec!.tolerations,
      [{ key: SANDBOX_NODE_TAINT.key, operator: "Equal", value: "true", effect: "NoSchedule" }],
    ],
    [
      "bounds /workspace and /tmp",
      () => pod.spec!.volumes!.map((v) => [v.name, v.emptyDir!.sizeLimit]),
      [
        ["workspace", "1Gi"],
        ["tmp", "256Mi"],
      ],
    ],
    ["mounts them writable", () => c.volumeMounts!.map((m) => m.mountPath), ["/workspace", "/tmp"]],
    ["has no runtimeClassName unless configured", () => pod.spec!.runtimeClassName, undefined],
    ["shares the node's user namespace unless configured (hostUsers unset)", () => pod.spec!.hostUsers, undefined],
    ["is named after the sandbox", () => pod.metadata!.name, "sb-1"],
    [
      "carries the sandbox and hashed owner labels",
      () => [pod.metadata!.labels![LABELS.sandbox], pod.metadata!.labels![LABELS.owner]],
      ["sb-1", ownerLabelValue("alice@example.com")],
    ],
    ["keeps the caller's env out of the pod spec", () => JSON.stringify(pod).includes("not-in-pod"), false],
  ])("%s", (_name, get, want) => {
    expect(get()).toEqual(want);
  });

  it("uses the configured runtimeClassName (gVisor/Kata) and namespace", () => {
    const p = planSandboxPod(spec(), gvisor);
    expect(p.spec!.runtimeClassName).toBe("gvisor");
    expect(p.metadata!.namespace).toBe("ns2");
  });

  it("runs in its own user namespace (hostUsers: false) with kubernetes.userNamespaces, hardened as before", () => {
    const p = planSandboxPod(spec(), userns);
    expect(p.spec!.hostUsers).toBe(false);
    // everything else is the same pod: only the one field differs
    const { hostUsers: _omit, ...rest } = p.spec!;
    expect(rest).toEqual(pod.spec);
    // the limits of user-namespaced pods: no host namespaces, only emptyDir-like volumes
    expect([p.spec!.hostNetwork, p.spec!.hostPID, p.spec!.hostIPC]).toEqual([undefined, undefined, undefined]);
    expect(p.spec!.volumes!.every((v) => Object.keys(v).sort().join() === "emptyDir,name")).toBe(true);
  });

  it.each([
    [{ userNamespaces: "yes" }, "config.kubernetes.userNamespaces"],
    [{ userNamespaces: 1 }, "config.kubernetes.userNamespaces"],
  ])("refuses kubernetes %j, naming the key", (kubernetes, key) => {
    expect(() => validateRuntimeConfig({ platform: "kubernetes", kubernetes })).toThrow(key);
  });

  it("defaults kubernetes.userNamespaces to false, with and without a kubernetes block", () => {
    expect(validateRuntimeConfig({}).kubernetes.userNamespaces).toBe(false);
    expect(config.kubernetes.userNamespaces).toBe(false);
  });

  it("sizes from the size class", () => {
    const p = planSandboxPod(spec({ size: config.sizeClasses.medium }), config);
    expect(p.spec!.containers[0].resources!.requests).toEqual({ cpu: "1", memory: "2Gi" });
    expect(p.spec!.volumes![0].emptyDir!.sizeLimit).toBe("8Gi");
  });
});

describe("planWarmPod", () => {
  const pod = planWarmPod(
    { profile: "base", image: "img:1", size: config.sizeClasses.small, suffix: "abc123", activeDeadlineSeconds: 90000 },
    config,
  );
  it("is labelled warm for its pool and carries no owner or sandbox", () => {
    expect(pod.metadata!.labels).toEqual({
      [LABELS.managed]: "true",
      [LABELS.pool]: POOL.warm,
      [LABELS.profile]: "base",
      [LABELS.size]: "small",
    });
    expect(pod.metadata!.name).toBe("warm-base-small-abc123");
  });
  it("is as hardened as a cold pod", () => {
    const cold = planSandboxPod(
      spec({ size: config.sizeClasses.small, image: { profile: "base", image: "img:1" } }),
      config,
    );
    expect(pod.spec!.containers[0].securityContext).toEqual(cold.spec!.containers[0].securityContext);
    expect(pod.spec!.securityContext).toEqual(cold.spec!.securityContext);
    expect(pod.spec!.activeDeadlineSeconds).toBe(90000);
  });
  it("gets its own user namespace like a cold pod when configured", () => {
    const warm = planWarmPod(
      {
        profile: "base",
        image: "img:1",
        size: config.sizeClasses.small,
        suffix: "abc123",
        activeDeadlineSeconds: 90000,
      },
      userns,
    );
    expect(warm.spec!.hostUsers).toBe(false);
    expect(pod.spec!.hostUsers).toBeUndefined();
  });
  it.each([
    ["Data_Science", "nano", "x1", "warm-data-science-nano-x1"],
    ["a".repeat(80), "nano", "zzzzzz", `${`warm-${"a".repeat(80)}`.slice(0, 56)}-zzzzzz`],
  ])("names %s/%s as a DNS label", (profile, size, suffix, want) => {
    const n = warmPodName(profile, size, suffix);
    expect(n).toBe(want);
    expect(n.length).toBeLessThanOrEqual(63);
  });
});
