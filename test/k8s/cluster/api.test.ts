// The test cluster behaves like a real one where the runtime depends on it: RBAC, quota
// admission, optimistic concurrency, watches and informers, CRDs with a status subresource,
// garbage collection, namespace deletion and scheduling onto the sandbox nodes.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ApiException,
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  makeInformer,
  RbacAuthorizationV1Api,
  type V1ConfigMap,
  type V1CustomResourceDefinition,
  Watch,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  API_GROUP,
  API_VERSION,
  SANDBOX_NODE_LABEL,
  SANDBOX_PLURAL,
  sandboxCrd,
} from "../../../runtime/k8s/contract.ts";
import {
  createNamespace,
  execInPod,
  kubeconfigFile,
  kubectl,
  loadKubeConfig,
  podManifest,
  runPod,
  serviceAccountKubeConfig,
  type TestNamespace,
  waitFor,
  waitForPod,
} from "../../support/cluster.ts";

let kc: KubeConfig;
let core: CoreV1Api;
let ns: TestNamespace;
const scratch = mkdtempSync(join(tmpdir(), "sbx-api-test-"));

beforeAll(async () => {
  kc = loadKubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  ns = await createNamespace(kc, "api");
});

afterAll(async () => {
  await ns?.delete();
  rmSync(scratch, { recursive: true, force: true });
});

async function apiError(p: Promise<unknown>): Promise<ApiException<unknown>> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApiException) return err;
    throw err;
  }
  throw new Error("expected the API server to refuse the request");
}

describe("RBAC", () => {
  it("forbids exec to a service account without pods/exec and allows it once granted", async () => {
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await runPod(kc, ns.name, podManifest("target"));
    for (const sa of ["reader", "operator"]) {
      await core.createNamespacedServiceAccount({ namespace: ns.name, body: { metadata: { name: sa } } });
    }
    const podRules = [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] }];
    await rbac.createNamespacedRole({ namespace: ns.name, body: { metadata: { name: "reader" }, rules: podRules } });
    await rbac.createNamespacedRole({
      namespace: ns.name,
      body: {
        metadata: { name: "operator" },
        rules: [...podRules, { apiGroups: [""], resources: ["pods/exec"], verbs: ["create", "get"] }],
      },
    });
    for (const sa of ["reader", "operator"]) {
      await rbac.createNamespacedRoleBinding({
        namespace: ns.name,
        body: {
          metadata: { name: sa },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: sa },
          subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns.name }],
        },
      });
    }

    const reader = await serviceAccountKubeConfig(kc, ns.name, "reader");
    const operator = await serviceAccountKubeConfig(kc, ns.name, "operator");
    // The reader may read pods but not exec: both client paths are refused.
    await reader.makeApiClient(CoreV1Api).readNamespacedPod({ name: "target", namespace: ns.name });
    await expect(execInPod(reader, ns.name, "target", ["true"])).rejects.toThrow(/403|Forbidden/);
    const spdy = await kubectl(
      ["exec", "-n", ns.name, "target", "--", "true"],
      undefined,
      kubeconfigFile(reader, join(scratch, "reader")),
    );
    expect(spdy.code).not.toBe(0);
    expect(spdy.stderr).toContain(`User "system:serviceaccount:${ns.name}:reader" cannot create resource "pods/exec"`);

    const ok = await execInPod(operator, ns.name, "target", ["sh", "-c", "echo granted"]);
    expect(ok.stdout.toString()).toBe("granted\n");
  });
});

describe("ResourceQuota", () => {
  it("rejects a pod beyond the namespace quota with the quota message", async () => {
    const q = await createNamespace(kc, "quota");
    try {
      await core.createNamespacedResourceQuota({
        namespace: q.name,
        body: { metadata: { name: "budget" }, spec: { hard: { "requests.cpu": "1", pods: "5" } } },
      });
      await waitFor("quota status from the controller-manager", async () => {
        const rq = await core.readNamespacedResourceQuota({ name: "budget", namespace: q.name });
        return rq.status?.hard?.["requests.cpu"] === "1";
      });
      const resources = { requests: { cpu: "600m", memory: "64Mi" }, limits: { cpu: "600m", memory: "64Mi" } };
      await core.createNamespacedPod({ namespace: q.name, body: podManifest("first", { resources }) });
      const err = await apiError(
        core.createNamespacedPod({ namespace: q.name, body: podManifest("second", { resources }) }),
      );
      expect(err.code).toBe(403);
      expect(String(err.body)).toContain(
        'pods \\"second\\" is forbidden: exceeded quota: budget, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1',
      );
      await waitFor("quota usage to be reported", async () => {
        const rq = await core.readNamespacedResourceQuota({ name: "budget", namespace: q.name });
        return rq.status?.used?.["requests.cpu"] === "600m" && rq.status.used.pods === "1";
      });
    } finally {
      await q.delete();
    }
  });
});

describe("optimistic concurrency", () => {
  it("answers an update carrying a stale resourceVersion with 409 Conflict", async () => {
    const cm = await core.createNamespacedConfigMap({
      namespace: ns.name,
      body: { metadata: { name: "occ" }, data: { v: "1" } },
    });
    await core.replaceNamespacedConfigMap({ name: "occ", namespace: ns.name, body: { ...cm, data: { v: "2" } } });
    const err = await apiError(
      core.replaceNamespacedConfigMap({ name: "occ", namespace: ns.name, body: { ...cm, data: { v: "3" } } }),
    );
    expect(err.code).toBe(409);
    expect(String(err.body)).toContain("the object has been modified");
    const now = await core.readNamespacedConfigMap({ name: "occ", namespace: ns.name });
    expect(now.data).toEqual({ v: "2" });
  });
});

describe("watch and informer", () => {
  it("delivers ADDED, MODIFIED and DELETED events to a watch", async () => {
    const events: string[] = [];
    const watch = new Watch(kc);
    const ctl = await watch.watch(
      `/api/v1/namespaces/${ns.name}/configmaps`,
      { fieldSelector: "metadata.name=watched" },
      (type, obj: V1ConfigMap) => events.push(`${type}:${obj.data?.v ?? ""}`),
      () => undefined,
    );
    try {
      await core.createNamespacedConfigMap({
        namespace: ns.name,
        body: { metadata: { name: "watched" }, data: { v: "1" } },
      });
      await core.patchNamespacedConfigMap({
        name: "watched",
        namespace: ns.name,
        body: [{ op: "replace", path: "/data/v", value: "2" }],
      });
      await core.deleteNamespacedConfigMap({ name: "watched", namespace: ns.name });
      await waitFor("three watch events", async () => events.length >= 3, 10_000);
      expect(events).toEqual(["ADDED:1", "MODIFIED:2", "DELETED:2"]);
    } finally {
      ctl.abort();
    }
  });

  it("keeps an informer's cache in sync with the API server", async () => {
    const informed = await createNamespace(kc, "informer");
    const informer = makeInformer<V1ConfigMap>(kc, `/api/v1/namespaces/${informed.name}/configmaps`, () =>
      core.listNamespacedConfigMap({ namespace: informed.name }),
    );
    const seen: string[] = [];
    informer.on("add", (o) => seen.push(`add:${o.metadata!.name}`));
    informer.on("update", (o) => seen.push(`update:${o.metadata!.name}`));
    informer.on("delete", (o) => seen.push(`delete:${o.metadata!.name}`));
    await informer.start();
    try {
      for (const name of ["c1", "c2", "c3"]) {
        await core.createNamespacedConfigMap({
          namespace: informed.name,
          body: { metadata: { name }, data: { v: "1" } },
        });
      }
      await core.replaceNamespacedConfigMap({
        name: "c2",
        namespace: informed.name,
        body: { ...(await core.readNamespacedConfigMap({ name: "c2", namespace: informed.name })), data: { v: "2" } },
      });
      await core.deleteNamespacedConfigMap({ name: "c3", namespace: informed.name });
      const server = async () => (await core.listNamespacedConfigMap({ namespace: informed.name })).items;
      const view = (items: readonly V1ConfigMap[]) =>
        items
          .map((c) => `${c.metadata!.name}@${c.metadata!.resourceVersion}`)
          .filter((n) => !n.startsWith("kube-root-ca"))
          .sort();
      await waitFor(
        "the informer cache to match the server",
        async () => {
          return JSON.stringify(view(informer.list())) === JSON.stringify(view(await server()));
        },
        10_000,
      );
      expect(informer.get("c2", informed.name)?.data).toEqual({ v: "2" });
      expect(informer.get("c3", informed.name)).toBeUndefined();
      expect(seen).toEqual(expect.arrayContaining(["add:c1", "add:c2", "add:c3", "update:c2", "delete:c3"]));
    } finally {
      await informer.stop();
      await informed.delete();
    }
  });
});

describe("custom resources", () => {
  it("installs the Sandbox CRD and keeps spec and status apart through the status subresource", async () => {
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    const crd = sandboxCrd() as unknown as V1CustomResourceDefinition;
    await ext.createCustomResourceDefinition({ body: crd }).catch((err: unknown) => {
      if (!(err instanceof ApiException && err.code === 409)) throw err; // another test file installed it
    });
    await waitFor("the CRD to be established", async () => {
      const got = await ext.readCustomResourceDefinition({ name: crd.metadata!.name! });
      return !!got.status?.conditions?.some((c) => c.type === "Established" && c.status === "True");
    });
    const custom = kc.makeApiClient(CustomObjectsApi);
    const ref = { group: API_GROUP, version: API_VERSION, namespace: ns.name, plural: SANDBOX_PLURAL };
    const body = {
      apiVersion: `${API_GROUP}/${API_VERSION}`,
      kind: "Sandbox",
      metadata: { name: "sb-1" },
      spec: { owner: "alice", profile: "python", size: "small", image: "python:3.12" },
      status: { phase: "Ignored" },
    };
    await waitFor("the Sandbox resource to be served", async () => {
      await custom.createNamespacedCustomObject({ ...ref, body });
      return true;
    });
    type Sandbox = typeof body & { metadata: { resourceVersion: string } };
    const created = (await custom.getNamespacedCustomObject({ ...ref, name: "sb-1" })) as Sandbox;
    expect(created.status).toBeUndefined(); // status is ignored on create

    const withStatus = (await custom.replaceNamespacedCustomObjectStatus({
      ...ref,
      name: "sb-1",
      body: { ...created, spec: { ...created.spec, owner: "mallory" }, status: { phase: "Running" } },
    })) as Sandbox;
    expect(withStatus.status).toEqual({ phase: "Running" });
    expect(withStatus.spec.owner).toBe("alice"); // spec is ignored on the status subresource

    const invalid = await apiError(
      custom.createNamespacedCustomObject({
        ...ref,
        body: { ...body, metadata: { name: "sb-2" }, spec: { owner: "x" } },
      }),
    );
    expect(invalid.code).toBe(422);
    expect(String(invalid.body)).toContain("spec.profile: Required value");
  });
});

describe("controllers", () => {
  it("garbage-collects dependents and finishes namespace deletion", async () => {
    const gc = await createNamespace(kc, "gc");
    const owner = await core.createNamespacedConfigMap({ namespace: gc.name, body: { metadata: { name: "owner" } } });
    await core.createNamespacedConfigMap({
      namespace: gc.name,
      body: {
        metadata: {
          name: "dependent",
          ownerReferences: [{ apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: owner.metadata!.uid! }],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ name: "owner", namespace: gc.name });
    await waitFor("the garbage collector to delete the dependent", async () => {
      const err = await apiError(core.readNamespacedConfigMap({ name: "dependent", namespace: gc.name }));
      return err.code === 404;
    });
    await runPod(kc, gc.name, podManifest("p"));
    await gc.delete();
    await waitFor(
      "the namespace to be deleted",
      async () => (await apiError(core.readNamespace({ name: gc.name }))).code === 404,
      60_000,
    );
  });

  it("schedules tolerating pods onto sandbox nodes and others onto the system node", async () => {
    const sandbox = await runPod(kc, ns.name, podManifest("on-sandbox"));
    const system = await runPod(kc, ns.name, podManifest("on-system", { onSandboxNode: false }));
    const nodeRole = async (name: string) => (await core.readNode({ name })).metadata!.labels![SANDBOX_NODE_LABEL.key];
    expect(await nodeRole(sandbox.spec!.nodeName!)).toBe(SANDBOX_NODE_LABEL.value);
    expect(await nodeRole(system.spec!.nodeName!)).toBe("system");
    // Selecting the sandbox nodes without tolerating their taint leaves a pod unschedulable.
    const untolerated = podManifest("untolerated");
    untolerated.spec!.tolerations = undefined;
    await core.createNamespacedPod({ namespace: ns.name, body: untolerated });
    const pending = await waitForPod(
      kc,
      ns.name,
      "untolerated",
      (p) => !!p.status?.conditions?.some((c) => c.type === "PodScheduled" && c.reason === "Unschedulable"),
    );
    expect(pending.status?.conditions?.find((c) => c.type === "PodScheduled")?.message).toContain(
      "3 node(s) had untolerated taint(s)",
    );
    const nodes = await core.listNode({ labelSelector: `${SANDBOX_NODE_LABEL.key}=${SANDBOX_NODE_LABEL.value}` });
    expect(nodes.items.length).toBeGreaterThanOrEqual(3);
    for (const n of nodes.items) {
      expect(n.status?.allocatable).toMatchObject({ cpu: "4", memory: "16Gi", pods: "110" });
    }
  });
});
