// Pause and resume on the Kubernetes backend against the real control plane and the suite's
// registry, through the real Manager: data byte for byte (SHA-256 of the whole tree) across a
// pause and a resume onto a warm pod and onto a cold pod; the pod really gone while paused and
// the Sandbox object kept with status.snapshot; env kept; auto-resume on exec; the snapshot
// deleted with the sandbox.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import type { SandboxResource } from "../../../runtime/k8s/resource.ts";
import { SNAPSHOT_RECORD_ANNOTATION } from "../../../runtime/k8s/snapshotRecords.ts";
import { OciClient } from "../../../runtime/snapshot/oci.ts";
import type { SnapshotRecord } from "../../../runtime/snapshot/record.ts";
import { registryUrl, waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "../runtime/support.ts";
import { FILL_SCRIPT, output, startPauseManager, TREE_DIGEST_SCRIPT } from "./runtime.ts";

let clients: KubeClients;
let ns: TestNamespaces;
let rt: Awaited<ReturnType<typeof startPauseManager>>;
let manager: SandboxManager;
let backend: KubernetesBackend;
let platform: KubernetesPlatform;
let oci: OciClient;
const OWNER = "alice";

beforeAll(async () => {
  const kubeconfigPath = await testKubeconfigPath();
  clients = adminClients(kubeconfigPath);
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "pz");
  rt = await startPauseManager({
    kubeconfigPath,
    namespaces: ns,
    registry: registryUrl(),
    identity: "pause-test",
    warm: 2,
  });
  ({ manager, backend, platform } = rt);
  oci = new OciClient({ registry: registryUrl() });
  await waitFor("leadership", async () => platform.testing.controller.isLeader(), 20_000);
  await waitFor("2 ready warm pods", async () => (await backend.poolStatus!())[0]?.ready === 2, 60_000);
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await ns?.cleanup();
});

const cr = async (id: string) =>
  (await clients.custom.getNamespacedCustomObject({
    group: API_GROUP,
    version: API_VERSION,
    namespace: ns.sandboxes,
    plural: SANDBOX_PLURAL,
    name: id,
  })) as SandboxResource;

const podsOf = async (id: string) =>
  (await clients.core.listNamespacedPod({ namespace: ns.sandboxes, labelSelector: `${LABELS.sandbox}=${id}` })).items;

async function sh(id: string, script: string): Promise<string> {
  const r = await output(await manager.exec(OWNER, id, { command: ["sh", "-c", script], timeoutMs: 120_000 }));
  if (r.exitCode !== 0) throw new Error(`sandbox ${id}: script exited ${r.exitCode}: ${r.stderr}`);
  return r.stdout.trim();
}

async function expectPausedOnCluster(id: string): Promise<SnapshotRecord> {
  const paused = await manager.get(OWNER, id);
  expect(paused).toMatchObject({
    id,
    owner: OWNER,
    phase: "Paused",
    ready: false,
    cpuRequestMillis: 0,
    memoryRequestBytes: 0,
  });
  // compute really gone, identity kept
  expect(await podsOf(id)).toEqual([]);
  const obj = await cr(id);
  expect(obj.spec.desiredState).toBe("Paused");
  expect(obj.status?.phase).toBe("Paused");
  const record = JSON.parse(obj.metadata.annotations![SNAPSHOT_RECORD_ANNOTATION]) as SnapshotRecord;
  expect(record).toMatchObject({ id, owner: OWNER, state: "paused", computeReleased: true, holder: "pause-test" });
  // status.snapshot names a manifest the registry really holds
  expect(obj.status?.snapshot).toEqual({
    ref: record.snapshot!.ref,
    digest: record.snapshot!.digest,
    sizeBytes: record.snapshot!.sizeBytes,
    createdAt: record.snapshot!.createdAt,
  });
  expect((await oci.headManifest(record.snapshot!.repository, record.snapshot!.tag))?.digest).toBe(
    record.snapshot!.digest,
  );
  return record;
}

describe("pause and resume on Kubernetes", () => {
  it("keeps every byte across pause and a resume onto a warm pod, with the same id, owner and env", async () => {
    const created = await manager.create({
      owner: OWNER,
      profile: "base",
      size: "nano",
      env: { SANDBOX_GREETING: "kept across pause" },
    });
    const id = created.id;
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await sh(id, FILL_SCRIPT(24));
    await platform.testing.records.settled(id); // a warm claim answers before its object is written
    const before = await sh(id, TREE_DIGEST_SCRIPT);
    const firstPod = (await cr(id)).spec.podName ?? id;

    const paused = await manager.pause!(OWNER, id);
    expect(paused.phase).toBe("Paused");
    const record = await expectPausedOnCluster(id);
    expect(record.snapshot!.sizeBytes).toBeGreaterThan(24 * 1048576);

    // a warm pod is ready for the resume to take
    await waitFor("a ready warm pod", async () => (await backend.poolStatus!())[0]!.ready > 0, 60_000);
    const resumed = await manager.resume!(OWNER, id);
    expect(resumed).toMatchObject({ id, owner: OWNER, phase: "Running", ready: true });
    const after = await cr(id);
    expect(after.spec.desiredState).toBe("Running");
    expect(after.spec.podName).toBeTruthy(); // a claimed warm pod, not a cold one named after the sandbox
    expect(after.spec.podName).not.toBe(firstPod);
    expect(await sh(id, TREE_DIGEST_SCRIPT)).toBe(before);
    expect(await sh(id, 'printf %s "$SANDBOX_GREETING"')).toBe("kept across pause");
    await waitFor("status.snapshot cleared", async () => (await cr(id)).status?.snapshot === undefined, 10_000);
    await manager.kill(OWNER, id);
  }, 240_000);

  it("resumes onto a cold pod when the size has no warm pool, and the old pod's files are not what came back", async () => {
    const created = await manager.create({ owner: OWNER, profile: "base", size: "small" });
    const id = created.id;
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await sh(id, FILL_SCRIPT(4));
    const before = await sh(id, TREE_DIGEST_SCRIPT);
    const oldUid = (await podsOf(id))[0]!.metadata!.uid;

    await manager.pause!(OWNER, id);
    await expectPausedOnCluster(id);
    const resumed = await manager.resume!(OWNER, id);
    expect(resumed).toMatchObject({ id, phase: "Running", ready: true, warm: false });
    const pods = await podsOf(id);
    expect(pods.map((p) => p.metadata!.name)).toEqual([id]);
    expect(pods[0]!.metadata!.uid).not.toBe(oldUid); // a new pod: its files came from the registry
    expect(await sh(id, TREE_DIGEST_SCRIPT)).toBe(before);
    await manager.kill(OWNER, id);
  }, 240_000);

  it("resumes a paused sandbox on exec, and deletes the snapshot with a paused sandbox", async () => {
    const id = (await manager.create({ owner: OWNER, profile: "base", size: "nano" })).id;
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await sh(id, "echo auto-resume-marker > /workspace/m");
    await manager.pause!(OWNER, id);
    await expectPausedOnCluster(id);

    expect(await sh(id, "cat /workspace/m")).toBe("auto-resume-marker");
    expect((await manager.get(OWNER, id)).phase).toBe("Running");

    await manager.pause!(OWNER, id);
    const record = await expectPausedOnCluster(id);
    await manager.kill(OWNER, id);
    await waitFor(
      "Sandbox object gone",
      async () =>
        await cr(id).then(
          () => false,
          () => true,
        ),
      20_000,
    );
    expect(await oci.headManifest(record.snapshot!.repository, record.snapshot!.digest)).toBeUndefined();
    await expect(manager.get(OWNER, id)).rejects.toMatchObject({ code: "not_found" });
  }, 240_000);

  // The exec path reads the pause record once: the owner check and the auto-resume decision
  // share one read (Manager.usable -> describeForCall); before, each read it on its own. Only
  // reads made under Manager.exec count (its frame, sync or async, is on the read's stack): the
  // watch events an exec causes (the activity annotation) read the record too, in the background.
  it("reads the pause record once per exec, before and after a pause", async () => {
    const id = (await manager.create({ owner: OWNER, profile: "base", size: "nano" })).id;
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    let execReads = 0;
    const store = platform.pause.records.store;
    const read = store.get.bind(store);
    const reads = vi.spyOn(store, "get").mockImplementation((of) => {
      const limit = Error.stackTraceLimit;
      Error.stackTraceLimit = 100;
      const stack = new Error().stack ?? "";
      Error.stackTraceLimit = limit;
      if (of === id && stack.includes("SandboxManager.exec")) execReads++;
      return read(of);
    });
    try {
      expect(await sh(id, "echo one")).toBe("one");
      expect(execReads).toBe(1);
      await manager.pause!(OWNER, id);
      await manager.resume!(OWNER, id);
      execReads = 0;
      expect(await sh(id, "echo two")).toBe("two");
      expect(execReads).toBe(1);
    } finally {
      reads.mockRestore();
    }
    await manager.kill(OWNER, id);
  }, 240_000);

  it("refuses to pause a sandbox of another owner with not found", async () => {
    const id = (await manager.create({ owner: OWNER, profile: "base", size: "nano" })).id;
    await expect(manager.pause!("mallory", id)).rejects.toMatchObject({ code: "not_found" });
    expect((await manager.get(OWNER, id)).phase).not.toBe("Paused");
    await manager.kill(OWNER, id);
  }, 120_000);
});
