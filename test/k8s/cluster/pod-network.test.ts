// The real node's pod network as the host sees it: this run's bridge, no route off the
// machine for pod addresses, clean-up of a crashed run's bridge and namespaces, and no
// port-forward into a kwok-played sandbox pod (it has no network). docs/control-plane.md.
import { spawnSync } from "node:child_process";
import { dirname } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { reapStaleNetworks } from "../../../tools/control-plane/network.ts";
import {
  createNamespace,
  kubectl,
  loadKubeConfig,
  podManifest,
  runPod,
  type TestNamespace,
} from "../../support/cluster.ts";

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
    // kwok's address is no real pod's: the unreachable route answers, not the default gateway
    const lookup = ip("route", "get", fake);
    expect(lookup.status).not.toBe(0);
    expect(lookup.stderr).toContain("No route to host");
    const real = await runPod(kc, ns.name, podManifest("real-ip", { onSandboxNode: false }));
    const route = ip("-j", "route", "get", real.status!.podIP!);
    const dev = (JSON.parse(route.stdout) as { dev: string }[])[0]!.dev;
    expect(dev).toMatch(/^sbxbr\d+$/);
    const alias = (JSON.parse(ip("-j", "link", "show", dev).stdout) as { ifalias?: string }[])[0]!.ifalias;
    expect(alias).toBe(`sbx owner=${alias?.split(/[= ]/)[2]} dir=${dirname(inject("podsDir"))}`);
  });

  it("refuses port-forward into a sandbox pod, naming why", async () => {
    await runPod(kc, ns.name, podManifest("no-net"));
    const r = await kubectl(["-n", ns.name, "port-forward", "pod/no-net", ":8080"], undefined);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("has no pod network");
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
