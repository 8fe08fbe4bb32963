// The shared informers' cache against the real API server: what every replica keeps of every
// sandbox's pod and record. managedFields (most of those objects) must not be kept, whether an
// object came with the first list, a watch ADDED or a watch MODIFIED.
import type { KubernetesObject, V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import type { SupervisedInformer } from "../../../runtime/k8s/informer.ts";
import { buildSandboxResource } from "../../../runtime/k8s/resource.ts";
import { SandboxIndex } from "../../../runtime/k8s/sandboxIndex.ts";
import { startSandboxWatch } from "../../../runtime/k8s/watch.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testSandboxSpec,
} from "./support.ts";

let clients: KubeClients;
let ns: TestNamespaces;
let informers: SupervisedInformer<unknown>[] = [];

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "watch");
});

afterAll(async () => {
  await Promise.all(informers.map((i) => i.stop()));
  await ns?.cleanup();
});

const pod = (name: string): V1Pod => ({
  metadata: { name, labels: { [LABELS.managed]: "true", [LABELS.sandbox]: name } },
  spec: { containers: [{ name: "sandbox", image: "registry.invalid/none" }] },
});

async function createPair(id: string): Promise<void> {
  const config = testConfig(ns);
  await clients.core.createNamespacedPod({ namespace: ns.sandboxes, body: pod(id) });
  await clients.custom.createNamespacedCustomObject({
    group: API_GROUP,
    version: API_VERSION,
    namespace: ns.sandboxes,
    plural: SANDBOX_PLURAL,
    body: buildSandboxResource(testSandboxSpec(config, id), ns.sandboxes),
  });
}

describe("the sandbox watch's cache", () => {
  it("keeps no managedFields of pods and records from the list, a watch ADDED or a watch MODIFIED", async () => {
    await createPair("listed");
    const index = new SandboxIndex({ credentialsRequired: false, clock: systemClock, logger: silentLogger() });
    informers = await startSandboxWatch({
      clients,
      namespace: ns.sandboxes,
      index,
      clock: systemClock,
      logger: silentLogger(),
      onSandboxGone: () => undefined,
    });
    await createPair("watched");
    // a MODIFIED event for an object the first list brought
    await clients.core.patchNamespacedPod({
      name: "listed",
      namespace: ns.sandboxes,
      body: [{ op: "add", path: "/metadata/labels/touched", value: "yes" }],
    });
    await vi.waitFor(
      () => {
        // the patch's label, not its resourceVersion: the scheduler or the node may write the pod again after it
        expect(index.pod("listed")?.metadata?.labels?.touched).toBe("yes");
        expect(index.pod("watched")).toBeDefined();
        expect(index.resource("watched")).toBeDefined();
      },
      { timeout: 30_000, interval: 100 },
    );
    const [pods, records] = informers as SupervisedInformer<KubernetesObject>[];
    for (const id of ["listed", "watched"]) {
      // the API server does send them: without the trim they would be cached
      const served = await clients.core.readNamespacedPod({ name: id, namespace: ns.sandboxes });
      expect(served.metadata?.managedFields?.length).toBeGreaterThan(0);
      expect(index.pod(id)?.metadata?.managedFields).toBeUndefined();
      expect(pods.cache.get(id, ns.sandboxes)?.metadata?.managedFields).toBeUndefined();
      expect(index.resource(id)?.metadata).not.toHaveProperty("managedFields");
      expect(records.cache.get(id, ns.sandboxes)?.metadata?.managedFields).toBeUndefined();
      // and what the replicas read is still there
      expect(index.pod(id)?.metadata?.labels?.[LABELS.sandbox]).toBe(id);
      expect(index.resource(id)?.spec.owner).toBe("alice");
    }
  });
});
