// The budget-share ledger's compare-and-swap against the real API server: another writer that
// lands between a round's read and its write makes the server answer 409. A round retries from
// a fresh read; one that loses every try writes nothing, logs it and counts it, and the age of
// the last renewal (what fences the replica at half a lease) keeps growing. Time is a manual
// monotonic clock; the rounds are called one by one, never on a timer.
import type { CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../../runtime/core/clock.ts";
import { ShareLedger } from "../../../runtime/k8s/budget/ledger.ts";
import { type KubeClients, mergePatch } from "../../../runtime/k8s/client.ts";
import { captureLogger, LEVEL } from "../../support/logs.ts";
import { adminClients, freshNamespaces, testKubeconfigPath, type TestNamespaces } from "../runtime/support.ts";

const LEASE_MS = 15_000;
const LEASE = "ledger-shares";
const ZERO = { cpuMillis: 0, memoryBytes: 0 };

let clients: KubeClients;
let ns: TestNamespaces;

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  ns = await freshNamespaces(clients.core, "ledger");
}, 120_000);

afterAll(async () => {
  await ns?.cleanup();
});

/**
 * The real Lease API, except that before each of the next `writesToSpoil` replaces another
 * writer changes the Lease for real, so the replace carries a stale resourceVersion.
 */
function interfering(api: CoordinationV1Api): { api: CoordinationV1Api; spoil(n: number): void } {
  let writesToSpoil = 0;
  let n = 0;
  const replace: CoordinationV1Api["replaceNamespacedLease"] = async (req, opts) => {
    if (writesToSpoil > 0) {
      writesToSpoil--;
      const other = { "sbx.test/other-writer": String(++n) };
      await api.patchNamespacedLease(
        { name: req.name, namespace: req.namespace, body: { metadata: { annotations: other } } },
        mergePatch,
      );
    }
    return api.replaceNamespacedLease(req, opts);
  };
  const wrapped = new Proxy(api, {
    get: (target, key, receiver) => (key === "replaceNamespacedLease" ? replace : Reflect.get(target, key, receiver)),
  });
  return { api: wrapped, spoil: (k) => (writesToSpoil = k) };
}

describe("the budget-share ledger's compare-and-swap", () => {
  it("retries a lost write, and a round that loses every try says so and ages towards the fence", async () => {
    const { api, spoil } = interfering(clients.coordination);
    const { logger, lines } = captureLogger();
    let now = 1_000;
    const ledger = new ShareLedger({
      api,
      namespace: ns.runtime,
      leaseName: LEASE,
      identity: "replica-a",
      budget: { cpuMillis: 10_000, memoryBytes: 10 * 2 ** 30 },
      headroom: () => ZERO,
      orphans: () => ZERO,
      clock: new ManualClock(),
      logger,
      leaseMs: LEASE_MS,
      tickMs: 200,
      monotonicMs: () => now,
    });

    await ledger.round(); // creates the Lease and writes the first share
    expect(ledger.snapshot()).toMatchObject({ conflicts: 0, abandoned: 0, renewedAgoMs: 0, fenced: false });

    now += 2_000; // a renewal is due
    spoil(1);
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ conflicts: 1, abandoned: 0, renewedAgoMs: 0 });

    now += 2_000;
    spoil(100); // every try loses
    await ledger.round();
    spoil(0);
    const after = ledger.snapshot();
    expect(after).toMatchObject({ conflicts: 5, abandoned: 1, renewedAgoMs: 2_000, fenced: false });
    const warned = lines.filter((l) => l.level === LEVEL.warn && /compare-and-swap .* lost/.test(l.msg));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ tries: 4, renewedAgoMs: 2_000, fenceAfterMs: LEASE_MS / 2 });

    // nothing landed since: at half a lease after the last renewal the replica fences itself
    now += LEASE_MS / 2 - 2_000;
    expect(ledger.snapshot()).toMatchObject({ renewedAgoMs: LEASE_MS / 2, fenced: true });
    // and the next round that lands lifts the fence
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ abandoned: 1, renewedAgoMs: 0, fenced: false });
  });
});
