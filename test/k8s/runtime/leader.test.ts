// Leader election through a real coordination.k8s.io Lease, with an injected clock: the
// leader renews, a candidate waits while the record keeps changing, takes over once the
// leader has been silent for a full lease duration, and the old leader steps down when it
// sees the new holder. Time moves only when the test says so.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaderElector } from "../../../runtime/controller/leader.ts";
import { ManualClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { adminClients, freshNamespaces, type TestNamespaces, testKubeconfigPath } from "./support.ts";

let clients: KubeClients;
let ns: TestNamespaces;

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  ns = await freshNamespaces(clients.core, "rt-lease");
});
afterAll(async () => ns?.cleanup());

describe("leader election on a Lease", () => {
  it("renews, waits, takes over after a silent lease duration, and the old leader steps down", async () => {
    const clock = new ManualClock(Date.UTC(2026, 5, 1));
    const log: string[] = [];
    const make = (identity: string) =>
      new LeaderElector({
        api: clients.coordination,
        namespace: ns.runtime,
        name: "sbx-controller",
        identity,
        clock,
        logger: silentLogger(),
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        onStartedLeading: (signal) => {
          log.push(`${identity} leads`);
          signal.addEventListener("abort", () => log.push(`${identity} aborted`));
        },
        onStoppedLeading: () => log.push(`${identity} stops`),
      });
    const a = make("replica-a");
    const b = make("replica-b");

    await a.tick();
    expect(a.isLeader()).toBe(true);
    await b.tick();
    expect(b.isLeader()).toBe(false);
    const lease1 = await clients.coordination.readNamespacedLease({ name: "sbx-controller", namespace: ns.runtime });
    expect(lease1.spec).toMatchObject({ holderIdentity: "replica-a", leaseDurationSeconds: 15 });

    // a keeps renewing: b never takes over, however long it waits, while the record changes
    for (let i = 0; i < 5; i++) {
      await clock.advance(5_000);
      await a.tick();
      await b.tick();
      expect(b.isLeader()).toBe(false);
    }

    // a dies (stops renewing). Just short of a lease duration b still waits...
    await clock.advance(14_999);
    await b.tick();
    expect(b.isLeader()).toBe(false);
    // ...then takes over.
    await clock.advance(1);
    await b.tick();
    expect(b.isLeader()).toBe(true);
    const lease2 = await clients.coordination.readNamespacedLease({ name: "sbx-controller", namespace: ns.runtime });
    expect(lease2.spec).toMatchObject({ holderIdentity: "replica-b", leaseTransitions: 1 });

    // a comes back, sees b's lease and steps down: its work is aborted
    await a.tick();
    expect(a.isLeader()).toBe(false);
    expect(log).toEqual(["replica-a leads", "replica-b leads", "replica-a aborted", "replica-a stops"]);

    // b releases on stop, so a successor does not wait out the lease
    await b.stop();
    await a.tick();
    expect(a.isLeader()).toBe(true);
    await a.stop();
  });
});
