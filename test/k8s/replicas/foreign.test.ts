// A replica whose part of the warm pool is empty takes another replica's ready pod instead of
// going cold (runtime/k8s/claims/writeBehind.ts takeForeign): a replica that just started owns
// no pods for one phase, and here the other replica owns both. The claim waits for its guarded
// patch, so it answers with a pod that is its own on the API server already.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import { LABELS, POOL } from "../../../runtime/k8s/contract.ts";
import { waitFor } from "../../support/cluster.ts";
import { startTestBackend, type TestBackend, testBackend, testSandboxSpec } from "../runtime/support.ts";

const LEASE_SECONDS = 4; // a phase is half of it
let a: TestBackend;
let b: KubernetesBackend | undefined;

beforeAll(async () => {
  a = await startTestBackend(
    "rep-fc",
    {
      warmPool: [{ profile: "base", size: "nano", count: 2 }],
      kubernetes: { budgetShares: { enabled: true, leaseSeconds: LEASE_SECONDS, tickMs: 200 } },
    },
    { identity: "replica-a" },
  );
  await waitFor("2 ready warm pods", async () => (await a.backend.poolStatus!())[0].ready === 2, 120_000);
  // a phase after replica a first saw itself in the shares, every pod is in its part
  await new Promise((r) => setTimeout(r, LEASE_SECONDS * 500 + 500));
}, 180_000);

afterAll(async () => {
  await b?.close();
  await a?.close();
});

describe("a warm claim from an empty part of the pool", () => {
  it("a replica that just started claims a ready pod of another's part, with the patch landed when it answers", async () => {
    b = testBackend(a.config, a.clients, { identity: "replica-b" });
    await b.start();
    const spec = testSandboxSpec(a.config, "fc-1", { owner: "owner-fc", ttlSeconds: 600 });
    const sb = await b.claim(spec);
    expect(sb, "a cold start: the claim found no pod of its own part and took none of the other's").toMatchObject({
      id: "fc-1",
      ready: true,
      warm: true,
    });
    expect(b.warmClaims.stats()).toMatchObject({ taken: 1, foreign: 1, landed: 1, pending: 0 });
    // answered only after the write: the API server has the pod as this sandbox's already
    const pods = await a.clients.core.listNamespacedPod({
      namespace: a.ns.sandboxes,
      labelSelector: `${LABELS.sandbox}=fc-1`,
    });
    expect(pods.items.map((p) => p.metadata?.labels?.[LABELS.pool])).toEqual([POOL.claimed]);
    // and the owner's part loses it: replica a sees one ready pod left
    await waitFor(
      "replica a to see the pod claimed",
      async () => (await a.backend.poolStatus!())[0].ready <= 1,
      20_000,
    );
  });
});
