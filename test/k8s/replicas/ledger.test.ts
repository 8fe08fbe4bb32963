// The budget-share ledger against the real API server. Its compare-and-swap: another writer
// that lands between a round's read and its write makes the server answer 409. A round retries
// from a fresh read; one that loses every try writes nothing, logs it and counts it, and the age
// of the last renewal (what fences the replica at half a lease) keeps growing. Its renewals go
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
import { abortOn, type KubeClients, mergePatch } from "../../../runtime/k8s/client.ts";
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
    // the real Lease API, but each replace waits until the test lets it go
    let release: () => void = () => {};
    let held = 0;
    const api = new Proxy(clients.shares, {
      get: (target, key, receiver) =>
        key === "replaceNamespacedLease"
          ? async (...args: Parameters<CoordinationV1Api["replaceNamespacedLease"]>) => {
              held++;
              await new Promise<void>((r) => (release = r));
              return target.replaceNamespacedLease(...args);
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
    await clock.advance(2_000); // the loop's renewal round: read, then its write is held (sent at +2 s)
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
