// The replica's connections to the real API server (PooledKubeConfig, runtime/k8s/client.ts):
// a burst of requests shares a bounded pool instead of opening a TLS connection per request in
// flight, an idle connection is kept past client-node's 4 s, and watches, which hold their
// connection for as long as they run, have a pool of their own so they never starve requests.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubeClients, MAX_CONNECTIONS, type PooledKubeConfig } from "../../../runtime/k8s/client.ts";
import { adminClients, freshNamespaces, type TestNamespaces, testKubeconfigPath } from "./support.ts";

let clients: KubeClients;
let kc: PooledKubeConfig;
let ns: TestNamespaces;
let opened = 0;
const onConnected = () => {
  opened++;
};

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  kc = clients.kc as PooledKubeConfig;
  ns = await freshNamespaces(clients.core, "pool");
  subscribe("undici:client:connected", onConnected);
});

afterAll(async () => {
  unsubscribe("undici:client:connected", onConnected);
  await ns?.cleanup();
});

const burst = (n: number) =>
  Promise.all(Array.from({ length: n }, () => clients.core.readNamespace({ name: ns.sandboxes })));

describe("the API connection pool", () => {
  it("serves a burst of 200 requests over at most MAX_CONNECTIONS connections, and keeps them past 4 s idle", async () => {
    await burst(1); // the pools exist once the first request authenticated
    opened = 0;
    await burst(200);
    expect(opened).toBeGreaterThan(0);
    expect(opened).toBeLessThanOrEqual(MAX_CONNECTIONS);
    expect(kc.poolStats()?.requests).toBeLessThanOrEqual(MAX_CONNECTIONS);
    // client-node's own pool dropped idle connections after 4 s, so every burst paid the handshakes again
    await new Promise((r) => setTimeout(r, 5_000));
    opened = 0;
    await burst(20);
    expect(opened).toBe(0);
  }, 60_000);

  it("holds watches in a pool of their own: more watches than the bound do not stall a request", async () => {
    const watch = new Watch(kc);
    const aborts: AbortController[] = [];
    const started = await Promise.all(
      Array.from({ length: MAX_CONNECTIONS + 4 }, async () =>
        aborts.push(
          await watch.watch(
            `/api/v1/namespaces/${ns.sandboxes}/configmaps`,
            {},
            () => undefined,
            () => undefined,
          ),
        ),
      ),
    );
    try {
      expect(started).toHaveLength(MAX_CONNECTIONS + 4);
      expect(kc.poolStats()?.streams).toBeGreaterThanOrEqual(MAX_CONNECTIONS + 4);
      // every request slot is free for requests: 40 reads answer while the watches stay open
      const reads = await burst(40);
      expect(reads.every((r) => r.metadata?.name === ns.sandboxes)).toBe(true);
    } finally {
      for (const a of aborts) a.abort();
    }
  }, 60_000);
});
