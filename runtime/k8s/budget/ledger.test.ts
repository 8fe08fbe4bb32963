// The ledger's late renewals, against a fake Lease API whose every request the test answers
// when it chooses (a slow API server), on a manual clock and a manual monotonic clock: a create
// that finds the replica fenced while a renewal is in flight waits for it and is admitted; the
// wait is bounded and ends in replica_fenced; no wait once the share may be lost; a request
// that never answers is aborted so the next round can renew. Nothing sleeps.
import { ApiException, type CoordinationV1Api, type V1Lease } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { Admission } from "../../core/admission.ts";
import { ManualClock } from "../../core/clock.ts";
import { CapacityError } from "../../core/errors.ts";
import { silentLogger } from "../../core/log.ts";
import { ShareLedger } from "./ledger.ts";

const LEASE_MS = 15_000;
const FENCE_MS = LEASE_MS / 2;
const BUDGET = { cpuMillis: 1_000, memoryBytes: 10 * 2 ** 30 };
const ZERO = { cpuMillis: 0, memoryBytes: 0 };
const nano = { name: "nano", cpuRequestMillis: 100, memoryRequestBytes: 128 * 2 ** 20 };

type Verb = "get" | "put" | "create" | "patch";
interface Pending {
  verb: Verb;
  answer(): void;
}

/**
 * One Lease in memory with resourceVersion checks. Every request waits in `pending` until the
 * test answers it (or `auto` answers at once); a request never answered stands for a dead
 * connection.
 */
function slowLeaseApi() {
  let stored: V1Lease | undefined;
  let rv = 0;
  const pending: Pending[] = [];
  const state = { auto: true };
  const copy = (l: V1Lease): V1Lease => structuredClone(l);
  const request = <T>(verb: Verb, apply: () => T): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const answer = () => {
        try {
          resolve(apply());
        } catch (err) {
          reject(err);
        }
      };
      if (state.auto) answer();
      else pending.push({ verb, answer });
    });
  const api = {
    readNamespacedLease: () =>
      request("get", () => {
        if (!stored) throw new ApiException(404, "not found", {}, {});
        return copy(stored);
      }),
    createNamespacedLease: ({ body }: { body: V1Lease }) =>
      request("create", () => {
        stored = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
        return copy(stored);
      }),
    replaceNamespacedLease: ({ body }: { body: V1Lease }) =>
      request("put", () => {
        if (body.metadata?.resourceVersion !== stored?.metadata?.resourceVersion)
          throw new ApiException(409, "conflict", {}, {});
        stored = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
        return copy(stored);
      }),
    // RFC 6902, the subset the ledger sends: test, replace and remove of one annotation
    patchNamespacedLease: ({ body }: { body: { op: string; path: string; value?: string }[] }) =>
      request("patch", () => {
        if (!stored) throw new ApiException(404, "not found", {}, {});
        const next = copy(stored);
        const annotations = next.metadata?.annotations ?? {};
        for (const op of body) {
          const key = op.path.replace("/metadata/annotations/", "").replace(/~1/g, "/").replace(/~0/g, "~");
          if (op.op === "test" && annotations[key] !== op.value) throw new ApiException(422, "test failed", {}, {});
          if (op.op === "replace" || op.op === "remove") {
            if (!(key in annotations)) throw new ApiException(422, "missing path", {}, {});
            if (op.op === "remove") delete annotations[key];
            else annotations[key] = op.value as string;
          }
        }
        stored = { ...next, metadata: { ...next.metadata, annotations, resourceVersion: String(++rv) } };
        return copy(stored);
      }),
  } as unknown as CoordinationV1Api;
  /** answers the oldest pending request, which must be of this verb */
  const answer = async (verb: Verb) => {
    await flush();
    const p = pending.shift();
    expect(p?.verb).toBe(verb);
    p?.answer();
    await flush();
  };
  return { api, state, pending, answer };
}

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

function setup(o: { requestTimeoutMs?: number; tickMs?: number } = {}) {
  const fake = slowLeaseApi();
  const clock = new ManualClock();
  const mono = { now: 1_000 };
  const ledger = new ShareLedger({
    api: fake.api,
    namespace: "sbx-system",
    leaseName: "sbx-controller-shares",
    identity: "replica-a",
    budget: BUDGET,
    headroom: () => ZERO,
    orphans: () => ZERO,
    clock,
    logger: silentLogger(),
    leaseMs: LEASE_MS,
    tickMs: 500,
    monotonicMs: () => mono.now,
    ...o,
  });
  const admission = new Admission(BUDGET, {
    scope: {
      limit: () => ledger.limit(),
      counts: () => true,
      attach: (used) => ledger.bindUsed(used),
      fenced: () => ledger.fenced(),
      awaitRenewal: () => ledger.awaitRenewal(),
    },
  });
  /** moves both clocks: the ledger's sleeps and its monotonic time */
  const advance = async (ms: number) => {
    mono.now += ms;
    await clock.advance(ms);
    await flush();
  };
  return { fake, clock, mono, ledger, admission, advance };
}

/** admission.renewal() then admit(), as CreatePath does */
async function create(
  admission: Admission,
  id: string,
): Promise<{ waited?: string; admitted: boolean; err?: unknown }> {
  const waiting = admission.renewal();
  const waited = waiting ? await waiting : undefined;
  try {
    admission.admit({ id, size: nano });
    return { waited, admitted: true };
  } catch (err) {
    return { waited, admitted: false, err };
  }
}

describe("a create while the budget share's renewal is late", () => {
  it("waits for the renewal in flight and is admitted once it lands", async () => {
    const { fake, clock, ledger, admission, mono } = setup({ tickMs: 2_000 });
    await ledger.start(); // the first share, written at once (sent at 0)
    expect(ledger.snapshot()).toMatchObject({ fenced: false, renewedAgoMs: 0 });
    expect(admission.renewal()).toBeUndefined(); // not fenced: nothing to wait for, no await on the path

    fake.state.auto = false;
    mono.now += 2_000;
    await clock.advance(2_000); // the loop's next round: a renewal, on a slow API server
    await flush(); // its patch (one request, no read before it) is sent at 2 s
    mono.now += 6_000; // 8 s: fenced, the patch still in flight
    expect(ledger.fenced()).toBe(true);

    const c = create(admission, "a");
    await flush();
    expect(fake.pending.map((p) => p.verb)).toEqual(["patch"]); // the wait joined that round, started no other
    await fake.answer("patch"); // lands: sent 6 s ago, the fence lifts
    expect(await c).toEqual({ waited: "renewed", admitted: true });
    expect(ledger.snapshot()).toMatchObject({ fenced: false, renewedAgoMs: 6_000 });
    await ledger.stop();
  });

  it("starts a round when none is running, and the renewal it lands admits the create", async () => {
    const { fake, ledger, admission, mono } = setup();
    await ledger.round();
    fake.state.auto = false;
    mono.now += FENCE_MS + 500; // no round ran since (the loop was starved): fenced, nothing in flight
    const c = create(admission, "a");
    await fake.answer("patch");
    expect(await c).toEqual({ waited: "renewed", admitted: true });
  });

  it("gives up at its bound and answers 429 replica_fenced with Retry-After", async () => {
    const { fake, ledger, admission, mono, advance } = setup();
    await ledger.round();
    fake.state.auto = false;
    mono.now += FENCE_MS + 500;
    const c = create(admission, "a");
    await flush();
    expect(fake.pending.map((p) => p.verb)).toEqual(["patch"]); // the round it started hangs
    await advance(2_000); // the wait's bound (2 s at a 15 s lease)
    const out = await c;
    expect(out).toMatchObject({ waited: "fenced", admitted: false });
    expect(out.err).toBeInstanceOf(CapacityError);
    expect((out.err as CapacityError).details).toMatchObject({ reason: "replica_fenced" });
    expect((out.err as CapacityError).retryAfterSeconds).toBeGreaterThan(0);
  });

  it("does not wait once the share may be lost (a whole lease since the last renewal)", async () => {
    const { fake, ledger, admission, mono } = setup();
    await ledger.round();
    fake.state.auto = false;
    mono.now += LEASE_MS;
    const out = await create(admission, "a");
    expect(out).toMatchObject({ waited: "fenced", admitted: false });
    expect(fake.pending).toEqual([]); // and started no round for it
  });

  it("aborts a request that never answers, so the next round renews", async () => {
    const { fake, ledger, mono, advance } = setup({ requestTimeoutMs: 3_000 });
    await ledger.round();
    fake.state.auto = false;
    mono.now += 2_000;
    let outcome: string | undefined;
    void ledger.round().then(
      () => (outcome = "landed"),
      (err: Error) => (outcome = err.message),
    );
    await flush();
    expect(fake.pending.map((p) => p.verb)).toEqual(["patch"]); // a dead connection: never answered
    await advance(2_999);
    expect(outcome).toBeUndefined();
    await advance(1);
    expect(outcome).toMatch(/the patch of Lease sbx-system\/sbx-controller-shares took longer than 3000 ms/);
    fake.pending.length = 0;
    fake.state.auto = true;
    await ledger.round();
    expect(ledger.snapshot()).toMatchObject({ fenced: false, renewedAgoMs: 0 });
  });
});
