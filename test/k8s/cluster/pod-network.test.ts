// The real node's pod network as the host sees it: this run's bridge, no route off the
// machine for pod addresses, clean-up of a crashed run's bridge and namespaces, and no
// port-forward into a kwok-played sandbox pod reaching its own loopback only. docs/control-plane.md.
import { spawnSync } from "node:child_process";
import net, { type AddressInfo } from "node:net";
import { dirname } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { reapStaleNetworks } from "../../../tools/control-plane/network.ts";
import {
  createNamespace,
  loadKubeConfig,
  podManifest,
  runPod,
  type TestNamespace,
  waitFor,
} from "../../support/cluster.ts";
import { httpText, portForward } from "./real-pods.fixtures.ts";

const kc = loadKubeConfig();
let ns: TestNamespace;

const ip = (...args: string[]) => spawnSync("ip", args, { encoding: "utf8" });

beforeAll(async () => {
  ns = await createNamespace(kc, "podnet");
});
afterAll(async () => {
  await ns?.delete();
});

describe("the pod network", () => {
  it("keeps sandbox pods' fake addresses on this machine and routes real pods to this run's bridge", async () => {
    const sandbox = await runPod(kc, ns.name, podManifest("fake-ip"));
    const fake = sandbox.status!.podIP!;
    expect(fake).toMatch(/^10\.244\./);
    // below the real nodes' bridges (10.244.200+), so never inside a parallel run's bridge
    expect(Number(fake.split(".")[2])).toBeLessThan(128);
    // kwok's address is no real pod's: the unreachable route answers, not the default gateway
    const lookup = ip("route", "get", fake);
    expect(lookup.status, `ip route get ${fake}: ${lookup.stdout}`).not.toBe(0);
    expect(lookup.stderr).toContain("No route to host");
    const real = await runPod(kc, ns.name, podManifest("real-ip", { onSandboxNode: false }));
    const route = ip("-j", "route", "get", real.status!.podIP!);
    const dev = (JSON.parse(route.stdout) as { dev: string }[])[0]!.dev;
    expect(dev).toMatch(/^sbxbr\d+$/);
    const alias = (JSON.parse(ip("-j", "link", "show", dev).stdout) as { ifalias?: string }[])[0]!.ifalias;
    expect(alias).toBe(`sbx owner=${alias?.split(/[= ]/)[2]} dir=${dirname(inject("podsDir"))}`);
  });

  it("port-forwards into a sandbox pod's own network namespace, never the host's loopback", async () => {
    // listening only after a while, so the first tries are always refused
    const server = ["sh", "-c", "sleep 2; exec python3 -m http.server 8080 --bind 127.0.0.1"];
    await runPod(kc, ns.name, podManifest("own-net", { command: server }));
    // a fresh port-forward per attempt: kubectl ends its forward on the first refused connection,
    // which is what a try before python listens (a busy machine starts it slowly) gets
    await waitFor("the sandbox's server through port-forward", async () => {
      const fwd = await portForward(ns.name, "own-net", 8080);
      try {
        return (await httpText(`http://127.0.0.1:${fwd.local}/`)).status === 200;
      } finally {
        fwd.stop();
      }
    });
    // a port only the host listens on is not in the sandbox's namespace
    const host = net.createServer((c) => c.end("host\n"));
    await new Promise<void>((r) => host.listen(0, "127.0.0.1", r));
    const hostPort = (host.address() as AddressInfo).port;
    const toHost = await portForward(ns.name, "own-net", hostPort);
    try {
      const got = await httpText(`http://127.0.0.1:${toHost.local}/`).catch((e: Error) => e);
      expect(got).toBeInstanceOf(Error);
    } finally {
      toHost.stop();
      host.close();
    }
  });

  it("removes the bridge and pod namespaces of a run whose owner died", () => {
    const dead = spawnSync("true").pid!;
    const bridge = "sbxbr49";
    const netns = `sbx-${bridge}-stale-test`;
    ip("link", "del", bridge);
    expect(ip("link", "add", "name", bridge, "type", "bridge").status).toBe(0);
    expect(ip("link", "set", bridge, "alias", `sbx owner=${dead} dir=/nonexistent`).status).toBe(0);
    expect(ip("netns", "add", netns).status).toBe(0);
    expect(reapStaleNetworks()).toContain(bridge);
    expect(ip("link", "show", bridge).status).not.toBe(0);
    expect(ip("netns", "list").stdout).not.toContain(netns);
    // a live run's bridge is left alone: ours still routes
    expect(ip("-j", "link", "show", "type", "bridge").stdout).toMatch(/sbxbr\d+/);
  });
});
