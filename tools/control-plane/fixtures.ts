// Fixtures on the test control plane, shared by the `k8s` test project and the Kubernetes
// benchmarks (which must not import test code): admin clients from a kubeconfig, the Sandbox
// CRD installed from the contract, a fresh namespace pair, more simulated sandbox nodes, and a
// runtime config for that cluster (its pods ignore the image; sbx-kubelet runs host tools).
import { randomBytes } from "node:crypto";
import {
  ApiextensionsV1Api,
  type CoreV1Api,
  type KubeConfig,
  type V1CustomResourceDefinition,
  type V1Node,
} from "@kubernetes/client-node";
import { type RuntimeConfig, type RuntimeConfigInput, validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { clientsFor, isConflict, isNotFound, type KubeClients, PooledKubeConfig } from "../../runtime/k8s/client.ts";
import {
  API_GROUP,
  SANDBOX_NODE_LABEL,
  SANDBOX_NODE_TAINT,
  SANDBOX_PLURAL,
  sandboxCrd,
} from "../../runtime/k8s/contract.ts";
import { nodeManifest } from "./plan.ts";

export function adminClients(path: string): KubeClients {
  const kc = new PooledKubeConfig();
  kc.loadFromFile(path);
  return clientsFor(kc);
}

/** The Sandbox CRD from the contract, installed once and waited on until Established. */
export async function installSandboxCrd(kc: KubeConfig): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  const body = clientModel(sandboxCrd()) as V1CustomResourceDefinition;
  const name = `${SANDBOX_PLURAL}.${API_GROUP}`;
  try {
    await api.createCustomResourceDefinition({ body });
  } catch (err) {
    if (!isConflict(err)) throw err;
    const cur = await api.readCustomResourceDefinition({ name });
    await api.replaceCustomResourceDefinition({
      name,
      body: { ...body, metadata: { ...body.metadata, resourceVersion: cur.metadata!.resourceVersion } },
    });
  }
  for (let i = 0; i < 100; i++) {
    const crd = await api.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`CRD ${name} did not become Established within 10 s`);
}

/**
 * client-node's typed clients serialize from their model's property names and silently drop
 * the rest; the JSON name `x-kubernetes-preserve-unknown-fields` is the model's
 * `x_kubernetes_preserve_unknown_fields`. Without this the installed CRD would prune every
 * free-form field (autoPause, probes). The Pulumi package sends the JSON as is.
 */
function clientModel(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(clientModel);
  if (typeof v !== "object" || v === null) return v;
  return Object.fromEntries(
    Object.entries(v).map(([k, x]) => [
      k === "x-kubernetes-preserve-unknown-fields" ? "x_kubernetes_preserve_unknown_fields" : k,
      clientModel(x),
    ]),
  );
}

export interface TestNamespaces {
  sandboxes: string;
  runtime: string;
  cleanup(): Promise<void>;
}

export async function freshNamespaces(core: CoreV1Api, prefix: string): Promise<TestNamespaces> {
  const suffix = randomBytes(3).toString("hex");
  const sandboxes = `${prefix}-${suffix}`;
  const runtime = `${prefix}-sys-${suffix}`;
  for (const name of [sandboxes, runtime]) {
    await core.createNamespace({ body: { metadata: { name, labels: { "sbx.dev/test": "true" } } } });
    // The controller-manager makes "default" shortly after; pods are refused until it exists.
    await core
      .createNamespacedServiceAccount({ namespace: name, body: { metadata: { name: "default" } } })
      .catch((err) => {
        if (!isConflict(err)) throw err;
      });
  }
  return {
    sandboxes,
    runtime,
    cleanup: async () => {
      for (const name of [sandboxes, runtime]) {
        try {
          await core.deleteNamespace({ name });
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
    },
  };
}

/**
 * More simulated sandbox nodes (kwok manages every node), labelled and tainted like the
 * suite's own, for tests that need room for hundreds of pods. Returns their removal.
 */
export async function addSandboxNodes(core: CoreV1Api, prefix: string, count: number): Promise<() => Promise<void>> {
  const names = Array.from({ length: count }, (_, i) => `sbx-${prefix}-${i}`);
  await Promise.all(
    names.map((name) =>
      core.createNode({
        body: nodeManifest({
          name,
          labels: {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            type: "kwok",
            [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value,
          },
          taints: [{ ...SANDBOX_NODE_TAINT }],
        }) as V1Node,
      }),
    ),
  );
  for (let i = 0; i < 300; i++) {
    const nodes = (await core.listNode({ labelSelector: SANDBOX_NODE_LABEL.key })).items.filter((n) =>
      names.includes(n.metadata!.name!),
    );
    if (
      nodes.length === count &&
      nodes.every((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"))
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return async () => {
    await Promise.all(
      names.map((name) =>
        core.deleteNode({ name }).catch((err) => (isNotFound(err) ? undefined : Promise.reject(err))),
      ),
    );
  };
}

export function testConfig(ns: TestNamespaces, over: Partial<RuntimeConfigInput> = {}): RuntimeConfig {
  return validateRuntimeConfig({
    platform: "kubernetes",
    catalog: { base: "registry.local/sbx/base:1" },
    budget: { cpu: "64", memory: "256Gi" },
    ...over,
    kubernetes: {
      namespace: ns.sandboxes,
      runtimeNamespace: ns.runtime,
      leaseName: "sbx-controller",
      ...(over.kubernetes ?? {}),
    },
  });
}
