// Crash safety of pause and resume on Kubernetes: a separate runtime replica (a child process)
// runs the operation and is SIGKILLed right after each durable step. While its in-flight
// record is fresh, this replica refuses to touch it (another replica may still be driving
// it); once the grace has passed, recovery settles it. Either way the sandbox ends running
// with its data or paused with a verified snapshot, and a final resume gives back the exact
// tree (SHA-256).
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { LABELS } from "../../../runtime/k8s/contract.ts";
import { OciClient } from "../../../runtime/snapshot/oci.ts";
import type { PauseStep, ResumeStep } from "../../../runtime/snapshot/snapshotter.ts";
import { registryUrl, waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "../runtime/support.ts";
import {
  FILL_SCRIPT,
  output,
  type PauseRuntime,
  type PauseRuntimeArgs,
  sandboxSpec,
  startPauseRuntime,
  TREE_DIGEST_SCRIPT,
} from "./runtime.ts";

const GRACE_MS = 3_000;
let clients: KubeClients;
let ns: TestNamespaces;
let rt: PauseRuntime;
let childArgs: Omit<PauseRuntimeArgs, "onStep">;
let oci: OciClient;

beforeAll(async () => {
  const kubeconfigPath = await testKubeconfigPath();
  clients = adminClients(kubeconfigPath);
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "pzc");
  const base = {
    kubeconfigPath,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    registry: registryUrl(),
    warm: 1,
  };
  rt = await startPauseRuntime({ ...base, identity: "replica-a", inFlightGraceMs: GRACE_MS });
  childArgs = { ...base, identity: "replica-b" };
  oci = new OciClient({ registry: registryUrl() });
  await waitFor("leadership", async () => rt.platform.testing.controller.isLeader(), 20_000);
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await ns?.cleanup();
});

async function sh(id: string, script: string): Promise<string> {
  const r = await output(await rt.snap.exec(id, { command: ["sh", "-c", script], timeoutMs: 60_000 }));
  if (r.exitCode !== 0) throw new Error(`sandbox ${id}: exited ${r.exitCode}: ${r.stderr}`);
  return r.stdout.trim();
}

async function crashChild(op: "pause" | "resume", id: string, step: string): Promise<void> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(import.meta.dirname, "crash-child.ts"), JSON.stringify(childArgs), op, id, step],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once("exit", (c, s) => resolve([c, s])),
  );
  if (signal !== "SIGKILL")
    throw new Error(`crash child for ${op}@${step} was not killed at the step (exit ${code}): ${stderr}`);
}

async function startWithData(id: string): Promise<string> {
  await rt.snap.provision(sandboxSpec(rt.config, id));
  await rt.snap.awaitReady(id, { timeoutMs: 60_000 });
  await sh(id, FILL_SCRIPT(3));
  return sh(id, TREE_DIGEST_SCRIPT);
}

/** The other replica's fresh in-flight record is left alone; after the grace, recovery settles it. */
async function recoverAfterCrash(id: string, op: "pause" | "resume"): Promise<void> {
  const rec = await rt.snap.snapshotter.status(id);
  if (rec && (rec.state === "pausing" || rec.state === "resuming")) {
    expect(rec.holder).toBe("replica-b");
    await expect(rt.snap.snapshotter[op](id)).rejects.toThrow(/by runtime replica replica-b .*retry when it finishes/);
    await new Promise((r) => setTimeout(r, GRACE_MS));
  }
  await rt.snap.snapshotter.recover();
}

/** Running with the data, or paused with a verified snapshot and no pod: never neither. */
async function expectSettled(id: string, digest: string): Promise<void> {
  const rec = await rt.snap.snapshotter.status(id);
  expect(["running", "paused", undefined]).toContain(rec?.state);
  if (rec?.state === "paused") {
    expect(rec.computeReleased).toBe(true);
    expect((await oci.headManifest(rec.snapshot!.repository, rec.snapshot!.tag))?.digest).toBe(rec.snapshot!.digest);
    const pods = await clients.core.listNamespacedPod({
      namespace: ns.sandboxes,
      labelSelector: `${LABELS.sandbox}=${id}`,
    });
    expect(pods.items.filter((p) => !p.metadata?.deletionTimestamp)).toEqual([]);
  } else {
    expect(await sh(id, TREE_DIGEST_SCRIPT)).toBe(digest);
  }
  await rt.snap.snapshotter.resume(id);
  expect(await sh(id, TREE_DIGEST_SCRIPT)).toBe(digest);
  await rt.snap.delete(id);
}

const PAUSE_STEPS: PauseStep[] = [
  "pausing-recorded",
  "pre-pause-hook",
  "layer-pushed",
  "manifest-put",
  "paused-recorded",
  "compute-released",
];
const RESUME_STEPS: ResumeStep[] = [
  "resuming-recorded",
  "slot-acquired",
  "layer-restored",
  "post-resume-hook",
  "running-recorded",
];

describe("Kubernetes pause/resume: the replica doing it dies after each durable step", () => {
  it.each(PAUSE_STEPS)(
    "pause killed after %s loses nothing",
    async (step) => {
      const id = `pzc-p-${step}`;
      const digest = await startWithData(id);
      await crashChild("pause", id, step);
      await recoverAfterCrash(id, "pause");
      await expectSettled(id, digest);
    },
    180_000,
  );

  it.each(RESUME_STEPS)(
    "resume killed after %s loses nothing",
    async (step) => {
      const id = `pzc-r-${step}`;
      const digest = await startWithData(id);
      await rt.snap.snapshotter.pause(id);
      await crashChild("resume", id, step);
      await recoverAfterCrash(id, "resume");
      await expectSettled(id, digest);
    },
    180_000,
  );
});
