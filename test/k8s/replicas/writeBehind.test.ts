// Write-behind warm claims on the real control plane, with the claim's pod patch held back by
// the test (the backend's reservation is wrapped): the claim answers "ready" while the patch is
// still unsent, the first exec waits for the patch, and a claim whose patch loses the race (a
// rival claimed the pod first) moves its sandbox to a cold pod without touching the rival's.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { Reservation } from "../../../runtime/k8s/claims/writeBehind.ts";
import { type KubeClients, mergePatch } from "../../../runtime/k8s/client.ts";
import { ANNOTATIONS, LABELS, POOL } from "../../../runtime/k8s/contract.ts";
import { waitFor } from "../../support/cluster.ts";
import { startTestBackend, type TestBackend, type TestNamespaces, testSandboxSpec } from "../runtime/support.ts";

let t: TestBackend;
let clients: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;
let platform: KubernetesPlatform;

const spec = (id: string): SandboxSpec => testSandboxSpec(config, id, { owner: `owner-${id}`, ttlSeconds: 600 });

/** Wraps the next reservation's write: `before` runs (and may be waited on) before the real patch is sent. */
function holdNextWrite(before: (podName: string) => Promise<void>): void {
  const pool = platform.testing.warmPool as unknown as { reserve: (...a: unknown[]) => Reservation | undefined };
  const real = pool.reserve.bind(pool);
  pool.reserve = (...args: unknown[]) => {
    pool.reserve = real;
    const r = real(...args);
    if (!r) return r;
    const held = async (): Promise<V1Pod> => {
      await before(r.pod.metadata!.name!);
      return r.write();
    };
    return { ...r, write: held };
  };
}

async function livePod(name: string): Promise<V1Pod> {
  return clients.core.readNamespacedPod({ name, namespace: ns.sandboxes });
}

async function run(id: string, script: string): Promise<string> {
  const s = await backend.exec(id, { command: ["sh", "-c", script] });
  const out: Buffer[] = [];
  s.stdout.on("data", (b: Buffer) => out.push(b));
  s.stdout.on("error", () => undefined);
  s.stderr.resume();
  s.stderr.on("error", () => undefined);
  expect((await s.result).exitCode).toBe(0);
  return Buffer.concat(out).toString().trim();
}

beforeAll(async () => {
  t = await startTestBackend(
    "rep-wb",
    { warmPool: [{ profile: "base", size: "nano", count: 2 }] },
    { identity: "replica-wb" },
    { awaitLeader: false }, // the pods it waits for below come from the leader anyway
  );
  ({ clients, ns, config, backend, platform } = t);
  await waitFor("2 ready warm pods", async () => (await backend.poolStatus!())[0].ready === 2, 120_000);
}, 180_000);

afterAll(async () => {
  await t?.close();
});

describe("write-behind warm claims", () => {
  it("answers ready before the pod patch is sent, and the first exec waits for the patch", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let sentAt = Number.POSITIVE_INFINITY;
    let claimedName = "";
    holdNextWrite(async (name) => {
      claimedName = name;
      await released;
      sentAt = performance.now();
    });
    const sb = await backend.claim(spec("wb-1"));
    expect(sb).toMatchObject({ id: "wb-1", ready: true, warm: true, phase: "Running" });
    expect(platform.testing.warmClaims.stats()).toMatchObject({ pending: 1, landed: 0 });
    // the API server still has the pod unclaimed: the claim did not wait for its write
    expect((await livePod(claimedName)).metadata?.labels?.[LABELS.pool]).toBe(POOL.warm);

    let doneAt = Number.POSITIVE_INFINITY;
    const exec = run("wb-1", "echo hi").then((out) => {
      doneAt = performance.now();
      return out;
    });
    // Give an ungated exec every chance to finish first (it would run in the unclaimed pod).
    await Promise.race([exec, new Promise((r) => setTimeout(r, 15_000))]);
    release();
    expect(await exec).toBe("hi");
    expect(doneAt).toBeGreaterThan(sentAt);
    const pod = await livePod(claimedName);
    expect(pod.metadata?.labels).toMatchObject({ [LABELS.pool]: POOL.claimed, [LABELS.sandbox]: "wb-1" });
  });

  it("a lost race moves the sandbox to a cold pod and leaves the winner's pod alone", async () => {
    await waitFor("a ready warm pod", async () => (await backend.poolStatus!())[0].ready >= 1, 120_000);
    let rivalPod = "";
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    holdNextWrite(async (name) => {
      rivalPod = name;
      await released;
    });
    const sb = await backend.claim(spec("wb-2"));
    expect(sb).toMatchObject({ id: "wb-2", ready: true, warm: true });
    let doneAt = Number.POSITIVE_INFINITY;
    const exec = run("wb-2", "echo ran").then((out) => {
      doneAt = performance.now();
      return out;
    });
    await Promise.race([exec, new Promise((r) => setTimeout(r, 15_000))]);
    // a rival (another replica, in a partition change) claims the pod first; then our patch goes
    await clients.core.patchNamespacedPod(
      {
        name: rivalPod,
        namespace: ns.sandboxes,
        body: {
          metadata: {
            labels: { [LABELS.pool]: POOL.claimed, [LABELS.sandbox]: "rival" },
            // a fresh claim: the orphan sweep gives it its grace period from now
            annotations: { [ANNOTATIONS.claimedAt]: new Date().toISOString() },
          },
        },
      },
      mergePatch,
    );
    const rivalAt = performance.now();
    release();
    // the first exec waited for the race to be decided, then for the sandbox's own cold pod
    expect(await exec).toBe("ran");
    expect(doneAt).toBeGreaterThan(rivalAt);
    expect(await backend.describe("wb-2")).toMatchObject({ ready: true, warm: false });
    expect(platform.testing.warmClaims.stats().lost).toBe(1);
    expect(backend.claimStats?.().lost, "the stats /metrics reads (runtime/core/metrics.ts)").toBe(1);
    const record = (await clients.custom.getNamespacedCustomObject({
      group: "sbx.dev",
      version: "v1alpha1",
      namespace: ns.sandboxes,
      plural: "sandboxes",
      name: "wb-2",
    })) as { spec: { podName?: string } };
    expect(record.spec.podName).toBeUndefined();
    const rival = await livePod(rivalPod);
    expect(rival.metadata?.deletionTimestamp).toBeUndefined();
    expect(rival.metadata?.labels?.[LABELS.sandbox]).toBe("rival");
  });
});
