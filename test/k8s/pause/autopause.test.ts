// Automatic pause and wake on Kubernetes, end to end on the real control plane with the real
// clock: exec probes report into the Sandbox's status, an idle probe pauses the sandbox, the
// wake time from a schedule probe is kept in the Sandbox's status while paused, survives a
// restart of the runtime (a new replica takes over, reading it from the status), and wakes the
// sandbox with its files.
// The timing rules themselves are tested with an injected clock in runtime/autopause.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubeClients, mergePatch } from "../../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import type { SandboxResource } from "../../../runtime/k8s/resource.ts";
import { registryUrl, waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "../runtime/support.ts";
import { output, type PauseRuntimeArgs, startPauseManager } from "./runtime.ts";

let clients: KubeClients;
let ns: TestNamespaces;
let args: PauseRuntimeArgs;
let rt: Awaited<ReturnType<typeof startPauseManager>> | undefined;
const OWNER = "alice";

beforeAll(async () => {
  const kubeconfigPath = await testKubeconfigPath();
  clients = adminClients(kubeconfigPath);
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "pza");
  args = {
    kubeconfigPath,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    registry: registryUrl(),
    identity: "replica-1",
    maintenance: true,
  };
}, 60_000);

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

describe("automatic pause and wake on Kubernetes", () => {
  it("pauses on an idle probe, keeps the wake time in the Sandbox status across a restart, and wakes on schedule", async () => {
    rt = await startPauseManager(args);
    await waitFor("leadership", async () => rt!.platform.replicas.leads(), 20_000);
    // The probe reports a task a day away, so the first replica can never wake the sandbox
    // however slowly this test runs; once that replica is gone, the test moves the recorded
    // wake time to a few seconds from now (as an operator editing the status would). The wake
    // then comes from the second replica and from nothing but the Sandbox's status: nothing
    // here depends on the test's own pace.
    const farTask = Math.floor(Date.now() / 1000) + 86_400;
    const created = await rt.manager.create({
      owner: OWNER,
      profile: "base",
      size: "nano",
      // after a wake the agent is busy again, so the idle rule does not put it straight back to sleep
      metadata: { "sbx.post-resume": "echo busy > /workspace/state" },
      autoPause: {
        probes: [
          { name: "Active", command: ["cat", "/workspace/state"], periodSeconds: 1, timeoutSeconds: 1 },
          { name: "Cron", command: ["cat", "/workspace/next-task"], periodSeconds: 1, timeoutSeconds: 1 },
        ],
        pause: { whenProbedIdle: { probe: "Active", messageRegex: "^idle$", thresholdDuration: "0s" } },
        resume: { whenProbedSchedule: { probe: "Cron", timeFormat: "unix", leadTime: "0s" } },
      },
    });
    const id = created.id;
    await rt.manager.wait(OWNER, id, { timeoutMs: 60_000 });
    const write = async (script: string) => {
      const r = await output(await rt!.manager.exec(OWNER, id, { command: ["sh", "-c", script] }));
      expect(r.exitCode).toBe(0);
    };
    await write(
      `echo busy > /workspace/state && echo ${farTask} > /workspace/next-task && echo precious > /workspace/data`,
    );

    // probe results and the predicted wake time are in the Sandbox's status
    const farIso = new Date(farTask * 1000).toISOString();
    await waitFor(
      "probe status and nextResumeTime in the Sandbox status",
      async () => {
        const s = (await cr(id)).status;
        return s?.probes?.Active?.message === "busy" && s?.nextResumeTime === farIso && s?.nextPauseTime === undefined;
      },
      20_000,
    );

    await write("echo idle > /workspace/state");
    await waitFor(
      "paused by the idle probe",
      async () => (await rt!.manager.get(OWNER, id)).phase === "Paused",
      30_000,
    );
    // the controller records its action right after the pause returns
    await waitFor(
      "the pause recorded in the Sandbox status",
      async () => (await cr(id)).status?.autoPause?.lastAction?.action === "pause",
      10_000,
    );
    expect((await cr(id)).status?.nextResumeTime).toBe(farIso);
    expect(
      (await clients.core.listNamespacedPod({ namespace: ns.sandboxes, labelSelector: `${LABELS.sandbox}=${id}` }))
        .items,
    ).toEqual([]);

    // the runtime stops; with no replica running, the recorded wake time moves to soon
    await rt.close();
    rt = undefined;
    expect((await cr(id)).status).toMatchObject({ nextResumeTime: farIso, autoPause: { nextResumeTime: farIso } });
    const wakeAt = Math.floor(Date.now() / 1000) + 5;
    const wakeIso = new Date(wakeAt * 1000).toISOString();
    await clients.custom.patchNamespacedCustomObjectStatus(
      {
        group: API_GROUP,
        version: API_VERSION,
        namespace: ns.sandboxes,
        plural: SANDBOX_PLURAL,
        name: id,
        body: { status: { nextResumeTime: wakeIso, autoPause: { nextResumeTime: wakeIso } } },
      },
      mergePatch,
    );

    // a new replica finds the wake time in the Sandbox and wakes it then, not before
    rt = await startPauseManager({ ...args, identity: "replica-2" });
    await waitFor("new leader", async () => rt!.platform.replicas.leads(), 20_000);
    await waitFor("woken on schedule", async () => (await rt!.manager.get(OWNER, id)).phase === "Running", 60_000);
    expect(Date.now() / 1000).toBeGreaterThanOrEqual(wakeAt - 1);
    const r = await output(
      await rt.manager.exec(OWNER, id, { command: ["cat", "/workspace/data", "/workspace/state"] }),
    );
    expect(r.stdout).toBe("precious\nbusy\n");
    await waitFor(
      "the wake recorded in the Sandbox status",
      async () => (await cr(id)).status?.autoPause?.lastAction?.action === "resume",
      10_000,
    );
    await rt.manager.kill(OWNER, id);
  }, 180_000);
});
