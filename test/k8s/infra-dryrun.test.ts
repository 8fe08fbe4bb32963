// Server-side dry-run of every Kubernetes object the Tenancy and Runtime components ship
// (plus the image pre-pull DaemonSet) against the real API server the k8s project starts:
// schema validation, CRD structural checks, RBAC escalation checks, NetworkPolicy
// validation and Pod Security `restricted` admission all run for real; nothing persists
// except two throwaway namespaces (and their ServiceAccounts), deleted afterwards.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { renderPrePullDaemonSet } from "../../components/cluster/prePull.ts";
import { bundlePartKey, bundleRuntime } from "../../components/runtime/bundle.ts";
import { buildRuntimeConfig, hashTokens } from "../../components/runtime/config.ts";
import { renderRuntime } from "../../components/runtime/render.ts";
import type { K8sObject } from "../../components/shared/k8s.ts";
import { renderTenancy } from "../../components/tenancy/plan.ts";
import { validatePlatformConfig } from "../../infra/schema.ts";
import { planSandboxPod, planWarmPod } from "../../runtime/k8s/podTemplate.ts";

const suffix = randomBytes(3).toString("hex");
const NS = { sandbox: `dryrun-${suffix}-sandboxes`, runtime: `dryrun-${suffix}-system` };
const FIELD_MANAGER = "sbx-infra-dryrun";

// The prod stack's sizing with throwaway namespaces; the real runtime entry, bundled now.
const cfg = validatePlatformConfig({
  namespaces: NS,
  budget: { cpu: "110", memory: "400Gi" },
  warmPool: [{ profile: "base", size: "nano", count: 100 }],
  egress: [
    { cidr: "0.0.0.0/0", ports: [443] },
    { namespace: "tools", podLabels: { app: "tool-gateway" }, ports: [8080] },
  ],
});
const bundle = bundleRuntime(fileURLToPath(new URL("../../runtime/main.ts", import.meta.url)));
const registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
const catalog = Object.fromEntries(cfg.images.profiles.map((p) => [p, `${registry}/sbx/sandbox-${p}:v1`]));
const configJson = JSON.stringify(
  buildRuntimeConfig({
    settings: { sizeClasses: cfg.sizeClasses, budget: cfg.budget, defaults: cfg.defaults, warmPool: cfg.warmPool },
    namespace: NS.runtime,
    sandboxNamespace: NS.sandbox,
    catalog,
    credentials: {
      baseRoleArn: "arn:aws:iam::123456789012:role/sbx-sandbox",
      bucket: "sbx-outputs",
      region: "us-east-1",
      durationSeconds: 900,
    },
    snapshots: { repositoryUrl: `${registry}/sbx/snapshots`, retentionDays: 7 },
  }),
);

const tenancy = renderTenancy({
  namespace: NS.sandbox,
  sizeClasses: cfg.sizeClasses,
  defaultSize: cfg.defaults.size,
  budget: cfg.budget,
  egress: cfg.egress,
  blockedCidrs: ["10.0.0.0/16"],
});
const runtime = renderRuntime({
  namespace: NS.runtime,
  sandboxNamespace: NS.sandbox,
  delivery: { kind: "bundle", bundle, nodeImage: cfg.runtime.nodeImage },
  managerReplicas: 2,
  controllerReplicas: 2,
  resources: { cpu: cfg.runtime.cpu, memory: cfg.runtime.memory },
  nodeSelector: { "sbx.dev/node-role": "system" },
  configJson,
  catalogJson: JSON.stringify(catalog),
  tokensJson: JSON.stringify(hashTokens({ alice: "x".repeat(32) })),
  configSha: "0".repeat(64),
});
const prePull = renderPrePullDaemonSet(NS.runtime, Object.values(catalog));
const namespaces = [...tenancy, ...runtime].filter((o) => o.kind === "Namespace");
const objects = [...tenancy, ...runtime, prePull].filter((o) => o.kind !== "Namespace");

// kubectl sends our JSON byte for byte. (@kubernetes/client-node's typed serializer would
// silently drop fields whose model names differ, e.g. LimitRange `default` -> `_default`.)
let kubeconfigPath: string;
let kubectlPath: string;

interface KubectlResult {
  ok: boolean;
  object?: any;
  error: string;
}

function kubectl(args: string[], obj?: unknown): KubectlResult {
  const r = spawnSync(kubectlPath, ["--kubeconfig", kubeconfigPath, ...args], {
    input: obj ? JSON.stringify(obj) : undefined,
    encoding: "utf8",
    timeout: 60_000,
    maxBuffer: 256 * 2 ** 20,
  });
  if (r.status !== 0) return { ok: false, error: `${r.stderr}${r.error ?? ""}` };
  return { ok: true, object: args.includes("json") ? JSON.parse(r.stdout) : undefined, error: "" };
}

function must(r: KubectlResult): any {
  if (!r.ok) throw new Error(r.error);
  return r.object;
}

/** Server-side apply with dryRun=All: validates and admits exactly like `pulumi up` would, stores nothing. */
const dryRunApply = (obj: unknown) =>
  kubectl(
    [
      "apply",
      "--server-side",
      "--dry-run=server",
      `--field-manager=${FIELD_MANAGER}`,
      "--force-conflicts",
      "-o",
      "json",
      "-f",
      "-",
    ],
    obj,
  );
const dryRunCreate = (obj: unknown) => kubectl(["create", "--dry-run=server", "-o", "json", "-f", "-"], obj);
const create = (obj: unknown) => kubectl(["create", "-o", "json", "-f", "-"], obj);

/** A pod built from a workload's template, dry-run created: Pod Security admission enforces on pods. */
function podFrom(obj: K8sObject, namespace: string): unknown {
  const template = (obj as any).spec.template;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: `${obj.metadata.name}-psa`, namespace, labels: template.metadata.labels },
    spec: template.spec,
  };
}

beforeAll(() => {
  kubeconfigPath = inject("kubeconfigPath");
  kubectlPath = join(inject("controlPlaneBin"), "kubectl");
  // namespaced dry-runs need their namespace, and pods their ServiceAccount: these are real
  // and go away with the namespaces afterwards
  for (const o of [...namespaces, ...objects.filter((x) => x.kind === "ServiceAccount")]) must(create(o));
});

afterAll(() => {
  if (kubectlPath) for (const ns of namespaces) kubectl(["delete", "namespace", ns.metadata.name, "--wait=false"]);
});

describe("the API server accepts what the platform ships", () => {
  it("ships the object kinds we expect", () => {
    // config and catalog, plus one ConfigMap per part of the runtime bundle
    const configMaps = Array<string>(2 + bundle.parts.length).fill("ConfigMap");
    expect(objects.map((o) => o.kind).sort()).toEqual([
      ...configMaps,
      "CustomResourceDefinition",
      "DaemonSet",
      "Deployment",
      "Deployment",
      "LimitRange",
      "NetworkPolicy",
      "NetworkPolicy",
      "NetworkPolicy",
      "PodDisruptionBudget",
      "PodDisruptionBudget",
      "ResourceQuota",
      "Role", // manager in the sandbox namespace
      "Role", // controller in the sandbox namespace
      "Role", // controller's Lease in the runtime namespace
      "Role", // manager's budget shares Lease in the runtime namespace
      "RoleBinding",
      "RoleBinding",
      "RoleBinding",
      "RoleBinding",
      "Secret",
      "Service",
      "ServiceAccount",
      "ServiceAccount",
    ]);
  });

  it.each(objects.map((o) => [`${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`, o] as const))(
    "%s",
    (_label, obj) => {
      const accepted = must(dryRunApply(obj));
      expect(accepted.kind).toBe(obj.kind);
      expect(accepted.metadata.name).toBe(obj.metadata.name);
    },
  );

  it("the real runtime bundle fits its ConfigMaps, every part accepted whole", async () => {
    const maps = objects.filter((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("sbx-runtime-"));
    expect(maps).toHaveLength(bundle.parts.length);
    let total = 0;
    for (const [i, cm] of maps.entries()) {
      const accepted = must(dryRunApply(cm));
      total += Buffer.from(accepted.binaryData[bundlePartKey(i)], "base64").length;
    }
    expect(total).toBe(bundle.gzBytes);
  });

  it("the quota the server stores has the hard values we derived", async () => {
    const q = must(dryRunApply(objects.find((o) => o.kind === "ResourceQuota")!));
    expect(q.spec.hard).toEqual({
      "requests.cpu": "110",
      "limits.cpu": "1100",
      "requests.memory": "400Gi",
      "limits.memory": "1600Gi",
      pods: "1100",
    });
  });
});

describe("Pod Security admission (restricted) admits our workloads", () => {
  it("the namespaces enforce restricted: a privileged pod is refused (control)", async () => {
    const bad = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "privileged", namespace: NS.runtime },
      spec: { containers: [{ name: "c", image: "busybox", securityContext: { privileged: true } }] },
    };
    const refused = dryRunCreate(bad);
    expect(refused.ok).toBe(false);
    expect(refused.error).toContain("violates PodSecurity");
  });

  it.each(
    objects.filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet").map((o) => [o.metadata.name, o] as const),
  )("%s pods pass restricted", async (_name, obj) => {
    const accepted = must(dryRunCreate(podFrom(obj, NS.runtime)));
    expect(accepted.metadata.name).toBe(`${obj.metadata.name}-psa`);
  });
});

describe("the runtime's sandbox pods fit the namespace Tenancy builds", () => {
  const size = {
    name: "nano",
    cpuRequestMillis: 100,
    cpuLimitMillis: 1000,
    memoryRequestBytes: 128 * 2 ** 20,
    memoryLimitBytes: 512 * 2 ** 20,
    workspaceBytes: 2 ** 30,
    tmpBytes: 2 ** 28,
    pids: 128,
  };
  const podConfig = {
    kubernetes: { namespace: NS.sandbox, runtimeNamespace: NS.runtime, leaseName: "sbx-controller" },
  };

  beforeAll(() => {
    // quota and LimitRange only act when stored: store them (the namespace goes away afterwards)
    for (const o of tenancy.filter((t) => t.kind === "ResourceQuota" || t.kind === "LimitRange")) must(create(o));
  });

  it("a cold sandbox pod and a warm pool pod are admitted (PSA restricted, LimitRange, quota)", async () => {
    const cold = planSandboxPod(
      {
        id: `sbx-${suffix}`,
        owner: "alice",
        image: { profile: "base", image: catalog.base },
        size,
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 60,
        metadata: {},
        createdAt: new Date(),
      },
      podConfig,
    );
    const warm = planWarmPod(
      { profile: "base", image: catalog.base, size, suffix, activeDeadlineSeconds: 7200 },
      podConfig,
    );
    for (const pod of [cold, warm]) {
      const accepted = must(dryRunCreate(pod));
      expect(accepted.metadata.namespace).toBe(NS.sandbox);
    }
  });

  it("with kubernetes.userNamespaces, cold and warm pods (hostUsers: false) are admitted too", async () => {
    const userns = { kubernetes: { ...podConfig.kubernetes, userNamespaces: true } };
    const cold = planSandboxPod(
      {
        id: `userns-${suffix}`,
        owner: "alice",
        image: { profile: "base", image: catalog.base },
        size,
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 60,
        metadata: {},
        createdAt: new Date(),
      },
      userns,
    );
    const warm = planWarmPod(
      { profile: "base", image: catalog.base, size, suffix: `u${suffix}`, activeDeadlineSeconds: 7200 },
      userns,
    );
    for (const pod of [cold, warm]) expect(must(dryRunCreate(pod)).spec.hostUsers).toBe(false);
    // control: the server enforces the documented limits of user-namespaced pods
    const refused = dryRunCreate({ ...cold, spec: { ...cold.spec, hostNetwork: true } });
    expect(refused.ok).toBe(false);
    expect(refused.error).toContain("spec.hostNetwork: Forbidden: when `hostUsers` is false");
  });

  it("a container without resources gets the default size class from the LimitRange", async () => {
    const bare = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "bare", namespace: NS.sandbox },
      spec: {
        securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } },
        containers: [
          {
            name: "c",
            image: "busybox",
            securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
          },
        ],
      },
    };
    const accepted = must(dryRunCreate(bare));
    expect(accepted.spec.containers[0].resources).toEqual({
      requests: { cpu: "100m", memory: "128Mi" },
      limits: { cpu: "1", memory: "512Mi" },
    });
  });

  it("a pod above the largest size class is refused by the LimitRange (control)", async () => {
    const huge = planSandboxPod(
      {
        id: `huge-${suffix}`,
        owner: "alice",
        image: { profile: "base", image: catalog.base },
        size: { ...size, cpuLimitMillis: 64_000 },
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 60,
        metadata: {},
        createdAt: new Date(),
      },
      podConfig,
    );
    const refused = dryRunCreate(huge);
    expect(refused.ok).toBe(false);
    expect(refused.error).toContain("maximum cpu usage per Container is 4");
  });
});

describe("the API server rejects what our validation also rejects (control)", () => {
  it("a NetworkPolicy `except` outside its cidr is invalid", async () => {
    const np = {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: { name: "bad", namespace: NS.sandbox },
      spec: { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/16", except: ["192.168.0.0/24"] } }] }] },
    };
    const refused = dryRunApply(np);
    expect(refused.ok).toBe(false);
    expect(refused.error).toContain("must be a strict subset of `cidr`");
  });
});
