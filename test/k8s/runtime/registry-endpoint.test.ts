// Where an in-cluster snapshot registry is (runtime/k8s/registryEndpoint.ts), read from real
// EndpointSlices on the test API server: a Service without a selector whose slices the test
// writes, so each case sets exactly which endpoints are ready. Then the OCI client itself
// pushed through such an address while its references keep the Service's name.
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { DiscoveryV1Api, type KubeConfig, type V1Endpoint } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inClusterRegistryOf } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import { RegistryEndpoint } from "../../../runtime/k8s/registryEndpoint.ts";
import { OciClient } from "../../../runtime/snapshot/oci.ts";
import { createNamespace, loadKubeConfig, registryUrl, type TestNamespace, waitFor } from "../../support/cluster.ts";
import { captureLogger, LEVEL } from "../../support/logs.ts";

let kc: KubeConfig;
let discovery: DiscoveryV1Api;
let ns: TestNamespace;
const SERVICE = "layers";

beforeAll(async () => {
  kc = loadKubeConfig();
  discovery = kc.makeApiClient(DiscoveryV1Api);
  ns = await createNamespace(kc, "regep");
}, 60_000);

afterAll(async () => {
  await ns?.delete();
});

const endpoint = (ip: string, ready = true, terminating = false): V1Endpoint => ({
  addresses: [ip],
  conditions: { ready, serving: ready, terminating },
});

/** Writes (or replaces) the one slice of the Service with these endpoints. */
async function slice(name: string, endpoints: V1Endpoint[], port = 5000): Promise<void> {
  const body = {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name,
      namespace: ns.name,
      labels: { "kubernetes.io/service-name": SERVICE, "endpointslice.kubernetes.io/managed-by": "sbx-test" },
    },
    addressType: "IPv4",
    ports: [{ name: "http", port, protocol: "TCP" }],
    endpoints,
  };
  await discovery.deleteNamespacedEndpointSlice({ name, namespace: ns.name }).catch(() => undefined);
  await discovery.createNamespacedEndpointSlice({ namespace: ns.name, body });
}

describe("RegistryEndpoint", () => {
  it("names the Service until it knows a ready pod, then keeps the pod it chose while that stays ready", async () => {
    const { logger, lines } = captureLogger();
    const ep = new RegistryEndpoint({
      discovery,
      service: { name: SERVICE, namespace: ns.name, port: 5000 },
      clock: systemClock,
      logger,
    });
    expect(ep.current()).toBe(`http://${SERVICE}.${ns.name}.svc:5000`);
    await ep.refresh();
    expect(ep.current()).toBe(`http://${SERVICE}.${ns.name}.svc:5000`); // no slice yet

    await slice("a", [endpoint("10.1.0.9"), endpoint("10.1.0.7"), endpoint("10.1.0.3", false)]);
    await ep.refresh();
    expect(ep.current()).toBe("http://10.1.0.7:5000"); // the lowest ready one

    // a new ready pod does not move it: uploads in flight stay on the instance that holds them
    await slice("a", [endpoint("10.1.0.2"), endpoint("10.1.0.9"), endpoint("10.1.0.7")]);
    await ep.refresh();
    expect(ep.current()).toBe("http://10.1.0.7:5000");

    // its pod terminates: the next ready one, from another slice and at its own target port
    await slice("a", [endpoint("10.1.0.7", true, true)]);
    await slice("b", [endpoint("10.1.0.5")], 5001);
    await ep.refresh();
    expect(ep.current()).toBe("http://10.1.0.5:5001");

    // none ready: the Service's name again, with one warning however long it lasts
    await slice("b", [endpoint("10.1.0.5", false)]);
    await slice("a", []);
    await ep.refresh();
    await ep.refresh();
    expect(ep.current()).toBe(`http://${SERVICE}.${ns.name}.svc:5000`);
    const warned = lines.filter((l) => l.level === LEVEL.warn && /no ready pod/.test(String(l.msg)));
    expect(warned).toHaveLength(1);
    const moves = lines.filter((l) => l.level === LEVEL.info).map((l) => (l as { address?: string }).address);
    expect(moves).toEqual(["http://10.1.0.7:5000", "http://10.1.0.5:5001"]);
  });

  it("keeps the address in use when the API cannot be read", async () => {
    await slice("a", [endpoint("10.1.0.8")]);
    await slice("b", []);
    let fail = false;
    const { logger, lines } = captureLogger();
    const ep = new RegistryEndpoint({
      discovery: {
        listNamespacedEndpointSlice: (req) =>
          fail ? Promise.reject(new Error("connect ECONNREFUSED")) : discovery.listNamespacedEndpointSlice(req),
      },
      service: { name: SERVICE, namespace: ns.name, port: 5000 },
      clock: systemClock,
      logger,
    });
    await ep.refresh();
    expect(ep.current()).toBe("http://10.1.0.8:5000");
    fail = true;
    await ep.refresh();
    expect(ep.current()).toBe("http://10.1.0.8:5000");
    expect(lines.some((l) => l.level === LEVEL.warn && /ECONNREFUSED/.test(JSON.stringify(l)))).toBe(true);
  });

  it("follows the slices on its own once started, and stops", async () => {
    await slice("a", [endpoint("10.1.0.20")]);
    await slice("b", []);
    const ep = new RegistryEndpoint({
      discovery,
      service: { name: SERVICE, namespace: ns.name, port: 5000 },
      clock: systemClock,
      logger: silentLogger(),
      refreshMs: 50,
    });
    ep.start();
    try {
      await waitFor("the first address", async () => ep.current() === "http://10.1.0.20:5000");
      await slice("a", [endpoint("10.1.0.21")]);
      await waitFor("the moved address", async () => ep.current() === "http://10.1.0.21:5000");
    } finally {
      await ep.stop();
    }
    await slice("a", [endpoint("10.1.0.22")]);
    await new Promise((r) => setTimeout(r, 200));
    expect(ep.current()).toBe("http://10.1.0.21:5000");
  });
});

describe("an OCI client whose registry is reached at another address", () => {
  it("sends every request to the address and keeps the registry's name in what it reports", async () => {
    const name = `http://${SERVICE}.${ns.name}.svc:5000`;
    let calls = 0;
    const oci = new OciClient({
      registry: name,
      address: () => {
        calls++;
        return registryUrl();
      },
      chunkBytes: 1 << 20,
    });
    try {
      const data = randomBytes(3 * 1024 * 1024 + 77); // several chunks: each PATCH goes to the address too
      const repo = `regep-${ns.name}/layers`;
      const pushed = await oci.pushBlob(repo, Readable.from([data]));
      expect(pushed.size).toBe(data.length);
      expect(calls).toBeGreaterThan(1);
      const back: Buffer[] = [];
      for await (const c of await oci.pullBlob(repo, pushed.digest)) back.push(c as Buffer);
      expect(Buffer.concat(back).equals(data)).toBe(true);
      expect(oci.base.host).toBe(`${SERVICE}.${ns.name}.svc:5000`);
    } finally {
      oci.close();
    }
  });

  it("only a Service URL names an in-cluster registry", () => {
    expect(inClusterRegistryOf("http://sbx-layers.sbx-system.svc:5000")).toEqual({
      name: "sbx-layers",
      namespace: "sbx-system",
      port: 5000,
    });
    expect(inClusterRegistryOf("http://sbx-layers.sbx-system.svc.cluster.local:80")?.port).toBe(80);
    for (const bad of [
      "https://sbx-layers.sbx-system.svc:5000",
      "http://sbx-layers.sbx-system:5000",
      "http://sbx-layers.sbx-system.svc",
      "http://sbx-layers.sbx-system.svc:70000",
      "http://Sbx.sbx-system.svc:5000",
    ])
      expect(inClusterRegistryOf(bad), bad).toBeUndefined();
  });
});
