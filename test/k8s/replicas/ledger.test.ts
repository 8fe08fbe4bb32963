// The budget-share ledger against the real API server. A renewal is a JSON patch of the
// replica's own annotation, so another writer in between cannot make it lose; a growth is a
// compare-and-swap, and another writer that lands between its read and its write makes the
// server answer 409: retried from a fresh read, and a round that loses every try grows nothing,
// logs it and counts it. An entry an observer retired fails the renewal's test (422) and the whole
// write takes it back; an old single-document Lease is moved to one annotation per replica. Its renewals go
// over connections of their own, never the replica's shared pool, and a create that finds the
// replica fenced while a renewal is in flight waits for it. Time is a manual monotonic clock;
// the rounds are called one by one or driven by a manual clock, never on a timer.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Admission } from "../../../runtime/core/admission.ts";
import { ManualClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import { ShareLedger } from "../../../runtime/k8s/budget/ledger.ts";
import { entryKey, formatEntry, readShares } from "../../../runtime/k8s/budget/shareEntries.ts";
import { parseSharesDoc, SHARES_ANNOTATION } from "../../../runtime/k8s/budget/sharesDoc.ts";
import { abortOn, type KubeClients, mergePatch } from "../../../runtime/k8s/client.ts";
import { captureLogger, LEVEL } from "../../support/logs.ts";
import { adminClients, freshNamespaces, type TestNamespaces, testKubeconfigPath } from "../runtime/support.ts";

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

describe("the budget-share ledger's writes", () => {
  it("renews with a patch other writers cannot spoil; a growth compare-and-swaps, retries, and says when it loses every try", async () => {
    const { api, spoil } = interfering(clients.coordination);
    const { logger, lines } = captureLogger();
    let now = 1_000;
    let orphans = { cpuMillis: 5_000, memoryBytes: 0 };
    const ledger = new ShareLedger({
      api,
      namespace: ns.runtime,
      leaseName: LEASE,
      identity: "replica-a",
      budget: { cpuMillis: 10_000, memoryBytes: 10 * 2 ** 30 },
      headroom: () => ZERO,
      orphans: () => orphans,
      clock: new ManualClock(),
      logger,
      leaseMs: LEASE_MS,
      tickMs: 200,
      monotonicMs: () => now,
    });
    const share = () => ledger.snapshot().share.cpuMillis;

    await ledger.round(); // creates the Lease and writes the first share
    expect(ledger.snapshot()).toMatchObject({ conflicts: 0, abandoned: 0, renewedAgoMs: 0, fenced: false });
    expect(share()).toBe(5_000);

    now += 2_000; // a renewal is due, and another writer changes the Lease before every replace
    spoil(100);
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ conflicts: 0, abandoned: 0, renewedAgoMs: 0 }); // the patch landed

    orphans = ZERO; // room to grow: that write must compare-and-swap, and every try loses
    now += 2_000;
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ conflicts: 4, abandoned: 1, renewedAgoMs: 0, fenced: false });
    expect(share()).toBe(5_000); // renewed all the same, and not grown
    const warned = lines.filter((l) => l.level === LEVEL.warn && /compare-and-swap .* lost/.test(l.msg));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ tries: 4, renewedAgoMs: 0, fenceAfterMs: LEASE_MS / 2 });

    spoil(1); // one lost try, then the growth lands
    await ledger.round();
    spoil(0);
    expect(ledger.snapshot()).toMatchObject({ conflicts: 5, abandoned: 1 });
    expect(share()).toBe(10_000);

    // nothing lands for half a lease: the replica fences itself; the next round that lands lifts it
    now += LEASE_MS / 2;
    expect(ledger.snapshot()).toMatchObject({ renewedAgoMs: LEASE_MS / 2, fenced: true });
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ renewedAgoMs: 0, fenced: false });
    await ledger.stop();
  });

  it("takes its entry back when an observer retired it, and moves an old single document to one annotation per replica", async () => {
    const name = `${LEASE}-legacy`;
    const vec = (c: number) => ({ cpuMillis: c, memoryBytes: 0 });
    const old = { replicas: { "replica-old": { share: vec(3_000), used: vec(0), want: false, beat: 4 } } };
    await clients.coordination.createNamespacedLease({
      namespace: ns.runtime,
      body: { metadata: { name, annotations: { [SHARES_ANNOTATION]: JSON.stringify(old) } } },
    });
    let now = 1_000;
    const ledger = new ShareLedger({
      api: clients.shares,
      namespace: ns.runtime,
      leaseName: name,
      identity: "replica-a",
      budget: { cpuMillis: 10_000, memoryBytes: 10 * 2 ** 30 },
      headroom: () => ZERO,
      orphans: () => ZERO,
      clock: new ManualClock(),
      logger: silentLogger(),
      leaseMs: LEASE_MS,
      tickMs: 200,
      monotonicMs: () => now,
    });
    await ledger.round();
    const annotations = async () =>
      (await clients.coordination.readNamespacedLease({ name, namespace: ns.runtime })).metadata?.annotations ?? {};
    let a = await annotations();
    // the old replica's share is counted and moved; the old document is a tombstone the old parser refuses
    expect(readShares(a).doc.replicas["replica-old"]).toEqual(old.replicas["replica-old"]);
    expect(readShares(a).doc.replicas["replica-a"].share.cpuMillis).toBe(5_000); // its fair part of two
    expect(() => parseSharesDoc(a[SHARES_ANNOTATION])).toThrow(/has no replicas object/);

    // an observer retires replica-a behind its back (as after a long stall)
    const mine = readShares(a).doc.replicas["replica-a"];
    await clients.coordination.patchNamespacedLease(
      {
        name,
        namespace: ns.runtime,
        body: {
          metadata: {
            annotations: {
              [entryKey("replica-a")]: formatEntry("replica-a", { ...mine, retired: true, beat: mine.beat + 1 }),
            },
          },
        },
      },
      mergePatch,
    );
    now += 2_000; // its renewal's patch tests the value it last saw: 422, and the whole write takes the entry back
    await ledger.round();
    a = await annotations();
    const back = readShares(a).doc.replicas["replica-a"];
    expect(back.retired).toBeUndefined();
    expect(back.share.cpuMillis).toBe(5_000); // its fair part of two
    expect(ledger.snapshot()).toMatchObject({ conflicts: 1, renewedAgoMs: 0, fenced: false });

    await ledger.close(); // gives the share back with a patch of its own entry
    expect(readShares(await annotations()).doc.replicas["replica-a"]).toBeUndefined();
  });
});

describe("the budget-share ledger's connections", () => {
  it("never share a socket with the replica's other requests", async () => {
    const sockets = new Map<object, Set<string>>();
    const onSend = (m: unknown) => {
      const { request, socket } = m as { request: { path: string }; socket: object };
      const kind = request.path.includes(`/leases/${LEASE}-pool`) ? "shares" : "other";
      sockets.set(socket, (sockets.get(socket) ?? new Set()).add(kind));
    };
    await clients.coordination.createNamespacedLease({
      namespace: ns.runtime,
      body: { metadata: { name: `${LEASE}-pool` } },
    });
    subscribe("undici:client:sendHeaders", onSend);
    try {
      // interleaved, one at a time: a shared pool would hand the idle connection of one to the next
      for (let i = 0; i < 5; i++) {
        await clients.core.readNamespace({ name: ns.runtime });
        await clients.shares.readNamespacedLease({ name: `${LEASE}-pool`, namespace: ns.runtime });
        await clients.coordination // the same kind of request, over the shared pool (404: no such Lease)
          .readNamespacedLease({ name: `${LEASE}-elsewhere`, namespace: ns.runtime })
          .catch(() => undefined);
      }
    } finally {
      unsubscribe("undici:client:sendHeaders", onSend);
    }
    const kinds = [...sockets.values()].map((k) => [...k].sort().join("+"));
    expect(kinds).toContain("shares");
    expect(kinds).toContain("other");
    expect(kinds).not.toContain("other+shares");
  });

  it("abort a request when its signal does (what bounds a stuck renewal)", async () => {
    await expect(
      clients.shares.readNamespacedLease(
        { name: `${LEASE}-pool`, namespace: ns.runtime },
        abortOn(AbortSignal.abort()),
      ),
    ).rejects.toThrow(/abort/i);
  });
});

describe("a create while a renewal is slow on the real API server", () => {
  it("waits for the renewal in flight and is admitted when it lands", async () => {
    // the real Lease API, but each write (replace or patch) waits until the test lets it go
    let release: () => void = () => {};
    let held = 0;
    const api = new Proxy(clients.shares, {
      get: (target, key, receiver) =>
        key === "replaceNamespacedLease" || key === "patchNamespacedLease"
          ? async (...args: unknown[]) => {
              held++;
              await new Promise<void>((r) => (release = r));
              return (target[key] as (...a: unknown[]) => unknown).apply(target, args);
            }
          : Reflect.get(target, key, receiver),
    });
    const clock = new ManualClock();
    let now = 1_000;
    const ledger = new ShareLedger({
      api,
      namespace: ns.runtime,
      leaseName: `${LEASE}-slow`,
      identity: "replica-a",
      budget: { cpuMillis: 10_000, memoryBytes: 10 * 2 ** 30 },
      headroom: () => ZERO,
      orphans: () => ZERO,
      clock,
      logger: silentLogger(),
      leaseMs: LEASE_MS,
      tickMs: 2_000,
      monotonicMs: () => now,
    });
    const admission = new Admission(
      { cpuMillis: 10_000, memoryBytes: 10 * 2 ** 30 },
      {
        scope: {
          limit: () => ledger.limit(),
          counts: () => true,
          fenced: () => ledger.fenced(),
          awaitRenewal: () => ledger.awaitRenewal(),
        },
      },
    );
    const heldOnce = async (n: number) => {
      while (held < n) await new Promise((r) => setTimeout(r, 10));
    };
    const started = ledger.start(); // the first round: its write is held too
    await heldOnce(1);
    release();
    await started;
    expect(ledger.snapshot()).toMatchObject({ fenced: false, renewedAgoMs: 0 });

    now += 2_000;
    await clock.advance(2_000); // the loop's renewal round: its patch is held (sent at +2 s)
    await heldOnce(2);
    now += 6_000; // +8 s: past the fence, the renewal still in flight
    expect(ledger.fenced()).toBe(true);
    const waiting = admission.renewal();
    expect(waiting).toBeDefined();
    release();
    expect(await waiting).toBe("renewed");
    expect(admission.admit({ id: "a", size: { cpuRequestMillis: 100, memoryRequestBytes: 2 ** 20 } }).id).toBe("a");
    expect(ledger.snapshot()).toMatchObject({ fenced: false, renewedAgoMs: 6_000 });
    await ledger.stop();
  });
});
