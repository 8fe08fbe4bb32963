// Server-side dry-run of every Kubernetes object the Tenancy and Runtime components ship
// (plus the image pre-pull DaemonSet) against the real API server the k8s project starts:
// schema validation, CRD structural checks, RBAC escalation checks, NetworkPolicy
// validation and Pod Security `restricted` admission all run for real; nothing persists
// except two throwaway namespaces (and their ServiceAccounts), deleted afterwards.
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { KubeConfig, KubernetesObjectApi, PatchStrategy, type KubernetesObject } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { renderPrePullDaemonSet } from "../../components/cluster/prePull.ts";
import { bundleRuntime } from "../../components/runtime/bundle.ts";
import { buildRuntimeConfig, hashTokens } from "../../components/runtime/config.ts";
import { renderRuntime } from "../../components/runtime/render.ts";
import { renderTenancy } from "../../components/tenancy/plan.ts";
import type { K8sObject } from "../../components/shared/k8s.ts";
import { validatePlatformConfig } from "../../infra/schema.ts";

const suffix = randomBytes(3).toString("hex");
const NS = { sandbox: `dryrun-${suffix}-sandboxes`, runtime: `dryrun-${suffix}-system` };
const FIELD_MANAGER = "sbx-infra-dryrun";

// The prod stack's sizing with throwaway namespaces; the real runtime entry, bundled now.
const cfg = validatePlatformConfig({
  namespaces: NS,
  budget: { cpu: "110", memory: "400Gi" },
  warmPool: [{ profile: "base", size: "nano", count: 100 }],
  egress: [{ cidr: "0.0.0.0/0", ports: [443] }, { namespace: "tools", podLabels: { app: "tool-gateway" }, ports: [8080] }],
});
const bundle = bundleRuntime(fileURLToPath(new URL("../../runtime/main.ts", import.meta.url)));
const registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
const catalog = Object.fromEntries(cfg.images.profiles.map((p) => [p, `${registry}/sbx/sandbox-${p}:v1`]));
const configJson = JSON.stringify(buildRuntimeConfig({
  settings: { sizeClasses: cfg.sizeClasses, budget: cfg.budget, defaults: cfg.defaults, warmPool: cfg.warmPool },
  namespace: NS.runtime,
  sandboxNamespace: NS.sandbox,
  catalog,
  credentials: { baseRoleArn: "arn:aws:iam::123456789012:role/sbx-sandbox", bucket: "sbx-outputs", region: "us-east-1", durationSeconds: 900 },
  snapshots: { repositoryUrl: `${registry}/sbx/snapshots`, retentionDays: 7 },
}));

const tenancy = renderTenancy({ namespace: NS.sandbox, sizeClasses: cfg.sizeClasses, defaultSize: cfg.defaults.size, budget: cfg.budget, egress: cfg.egress, blockedCidrs: ["10.0.0.0/16"] });
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

let api: KubernetesObjectApi;

/** Server-side apply with dryRun=All: validates and admits exactly like `pulumi up` would, stores nothing. */
function dryRunApply(obj: K8sObject): Promise<KubernetesObject> {
  return api.patch(obj as KubernetesObject, undefined, "All", FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
}

/** A pod built from a workload's template, dry-run created: Pod Security admission enforces on pods. */
function podFrom(obj: K8sObject, namespace: string): KubernetesObject {
  const template = (obj as any).spec.template;
  return { apiVersion: "v1", kind: "Pod", metadata: { name: `${obj.metadata.name}-psa`, namespace, labels: template.metadata.labels }, spec: template.spec } as KubernetesObject;
}

function errorText(e: unknown): string {
  const err = e as { body?: unknown; message?: string };
  return `${typeof err.body === "string" ? err.body : JSON.stringify(err.body ?? "")} ${err.message ?? ""}`;
}

beforeAll(async () => {
  const kc = new KubeConfig();
  kc.loadFromFile(inject("kubeconfigPath"));
  api = KubernetesObjectApi.makeApiClient(kc);
  // namespaced dry-runs need their namespace, and pods their ServiceAccount: these are real
  // and go away with the namespaces afterwards
  for (const ns of namespaces) await api.create(ns as KubernetesObject, undefined, undefined, FIELD_MANAGER);
  for (const sa of objects.filter((o) => o.kind === "ServiceAccount")) await api.create(sa as KubernetesObject, undefined, undefined, FIELD_MANAGER);
});

afterAll(async () => {
  for (const ns of namespaces) await api?.delete(ns as KubernetesObject).catch(() => undefined);
});

describe("the API server accepts what the platform ships", () => {
  it("ships the object kinds we expect", () => {
    expect(objects.map((o) => o.kind).sort()).toEqual([
      "ConfigMap", "ConfigMap", "ConfigMap", "CustomResourceDefinition", "DaemonSet", "Deployment", "Deployment",
      "LimitRange", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy", "PodDisruptionBudget", "PodDisruptionBudget",
      "ResourceQuota", "Role", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "RoleBinding",
      "Secret", "Service", "ServiceAccount", "ServiceAccount",
    ]);
  });

  it.each(objects.map((o) => [`${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`, o] as const))("%s", async (_label, obj) => {
    const accepted = await dryRunApply(obj);
    expect(accepted.kind).toBe(obj.kind);
    expect(accepted.metadata?.name).toBe(obj.metadata.name);
  });

  it("the real runtime bundle fits its ConfigMap", async () => {
    const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("sbx-runtime-"))!;
    const accepted = (await dryRunApply(cm)) as any;
    expect(Buffer.from(accepted.binaryData["runtime.mjs.gz"], "base64").length).toBe(bundle.gzBytes);
  });

  it("the quota the server stores has the hard values we derived", async () => {
    const q = (await dryRunApply(objects.find((o) => o.kind === "ResourceQuota")!)) as any;
    expect(q.spec.hard).toEqual({ "requests.cpu": "110", "limits.cpu": "1100", "requests.memory": "400Gi", "limits.memory": "1600Gi", pods: "1100" });
  });
});

describe("Pod Security admission (restricted) admits our workloads", () => {
  it("the namespaces enforce restricted: a privileged pod is refused (control)", async () => {
    const bad = { apiVersion: "v1", kind: "Pod", metadata: { name: "privileged", namespace: NS.runtime }, spec: { containers: [{ name: "c", image: "busybox", securityContext: { privileged: true } }] } };
    const refused = await api.create(bad as KubernetesObject, undefined, "All").then(() => "accepted", errorText);
    expect(refused).toContain("violates PodSecurity");
  });

  it.each(objects.filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet").map((o) => [o.metadata.name, o] as const))("%s pods pass restricted", async (_name, obj) => {
    const accepted = await api.create(podFrom(obj, NS.runtime), undefined, "All");
    expect(accepted.metadata?.name).toBe(`${obj.metadata.name}-psa`);
  });
});

describe("the API server rejects what our validation also rejects (control)", () => {
  it("a NetworkPolicy `except` outside its cidr is invalid", async () => {
    const np = { apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", metadata: { name: "bad", namespace: NS.sandbox }, spec: { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/16", except: ["192.168.0.0/24"] } }] }] } };
    const refused = await dryRunApply(np).then(() => "accepted", errorText);
    expect(refused).toContain("must be a strict subset of `cidr`");
  });
});
