// The pause/resume record kept in the Sandbox object, shared by two runtime replicas against
// the real API server: a write goes through only if the record is still what that replica
// last saw (an unrelated write to the object in between does not count), the record and
// status.snapshot are visible to the other replica, and deleting the record leaves the
// Sandbox alone.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { mergePatch } from "../../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import type { SandboxResource } from "../../../runtime/k8s/resource.ts";
import { type SnapshotRecord, type SnapshotRecordStore, toStoredSpec } from "../../../runtime/snapshot/record.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testPlatform,
} from "../runtime/support.ts";
import { sandboxSpec } from "./runtime.ts";

let clients: KubeClients;
let ns: TestNamespaces;
let a: KubernetesPlatform;
let b: KubernetesPlatform;

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "pzr");
  const config = testConfig(ns);
  a = testPlatform(config, clients, { identity: "replica-a" });
  b = testPlatform(config, clients, { identity: "replica-b" });
  await Promise.all([a.backend.start(), b.backend.start()]);
}, 60_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await ns?.cleanup();
});

const store = (x: KubernetesPlatform): SnapshotRecordStore => x.pause.records.store;
const crApi = () => ({ group: API_GROUP, version: API_VERSION, namespace: ns.sandboxes, plural: SANDBOX_PLURAL });

function record(id: string, state: SnapshotRecord["state"], over: Partial<SnapshotRecord> = {}): SnapshotRecord {
  const spec = sandboxSpec(testConfig(ns), id);
  return {
    id,
    owner: spec.owner,
    state,
    generation: 1,
    spec: toStoredSpec(spec),
    sandbox: {
      id,
      owner: spec.owner,
      profile: "base",
      size: "nano",
      phase: "Running",
      ready: true,
      createdAt: spec.createdAt.toISOString(),
      expiresAt: spec.createdAt.toISOString(),
      metadata: {},
      cpuRequestMillis: 100,
      memoryRequestBytes: 1,
    },
    autoResume: true,
    updatedAt: new Date().toISOString(),
    ...over,
  };
}

describe("SandboxRecordStore (the record in the Sandbox object)", () => {
  it("lets only the replica that saw the current record replace it", async () => {
    const id = "rec-cas";
    await a.backend.provision(sandboxSpec(testConfig(ns), id));
    await a.testing.records.settled(id);
    await waitFor("replica b sees the sandbox", async () => !!(await b.backend.describe(id)), 10_000);

    expect(await store(a).get(id)).toBeUndefined();
    expect(await store(b).get(id)).toBeUndefined();
    await store(a).put(record(id, "pausing", { holder: "replica-a" }));

    // b last saw "no record": its write must not go through
    await expect(store(b).put(record(id, "pausing", { holder: "replica-b" }))).rejects.toMatchObject({
      code: "conflict",
    });
    await waitFor("replica b sees a's record", async () => (await store(b).get(id))?.holder === "replica-a", 10_000);

    // an unrelated write to the object (activity) between a's read and write is not a conflict
    await clients.custom.patchNamespacedCustomObject(
      {
        ...crApi(),
        name: id,
        body: { metadata: { annotations: { "sbx.dev/last-activity": new Date().toISOString() } } },
      },
      mergePatch,
    );
    const snapshot = {
      repository: "r",
      tag: "t",
      ref: "reg/r@sha256:00",
      digest: "sha256:00",
      sizeBytes: 42,
      createdAt: new Date().toISOString(),
      layers: [],
    };
    await store(a).put(record(id, "paused", { holder: "replica-a", snapshot }));

    const obj = (await clients.custom.getNamespacedCustomObject({ ...crApi(), name: id })) as SandboxResource;
    expect(obj.status?.snapshot).toEqual({
      ref: snapshot.ref,
      digest: snapshot.digest,
      sizeBytes: 42,
      createdAt: snapshot.createdAt,
    });
    await waitFor("replica b sees the paused record", async () => (await store(b).get(id))?.state === "paused", 10_000);
    expect((await store(b).list()).map((r) => r.id)).toContain(id);

    // now b has seen the latest record, so its write goes through
    await store(b).put(record(id, "resuming", { holder: "replica-b", snapshot }));
    await expect(store(a).put(record(id, "running", { holder: "replica-a" }))).rejects.toMatchObject({
      code: "conflict",
    });

    await store(b).delete(id);
    const after = (await clients.custom.getNamespacedCustomObject({ ...crApi(), name: id })) as SandboxResource;
    expect(after.metadata.annotations?.["sbx.dev/snapshot-record"]).toBeUndefined();
    expect(after.status?.snapshot).toBeUndefined();
    await a.backend.delete(id);
  }, 60_000);

  it("answers not found for a record of a sandbox that does not exist, and deleting it is a no-op", async () => {
    await expect(store(a).put(record("rec-none", "pausing"))).rejects.toMatchObject({ code: "not_found" });
    await expect(store(a).delete("rec-none")).resolves.toBeUndefined();
  });
});
