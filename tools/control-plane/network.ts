// The pod network of the real nodes (docs/control-plane.md): one host bridge per test
// control plane, with a private /24 of 10.244.200.0-10.244.249.255 that routes nowhere off
// this machine (the host does not forward). sbx-kubelet puts each real pod's network
// namespace on it with a veth. The bridge's alias names its owner's PID, so a later run
// removes bridges (and their pods' namespaces) whose owner died without tearing down.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

export interface PodNetwork {
  bridge: string;
  /** e.g. 10.244.200.0/24; the bridge holds .1 */
  cidr: string;
  gateway: string;
}

const BRIDGE_PREFIX = "sbxbr";
const MAX_BRIDGES = 50;
/** kwok's fake pod IPs (sandbox pods) are in here too: they must never route off-machine. */
const POD_SUPERNET = "10.244.0.0/16";

function ip(args: string[]): { ok: boolean; out: string } {
  const r = spawnSync("ip", args, { encoding: "utf8" });
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? String(r.error) : ""}` };
}

function mustIp(args: string[]): string {
  const r = ip(args);
  if (!r.ok) {
    throw new Error(
      `control plane: pod network: ip ${args.join(" ")} failed: ${r.out.trim()}. ` +
        "The real nodes need root (CAP_NET_ADMIN) and iproute2 (apt-get install iproute2).",
    );
  }
  return r.out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("node");
  } catch {
    return false;
  }
}

interface Link {
  ifname: string;
  ifalias?: string;
}

function ourBridges(): Link[] {
  const r = ip(["-j", "link", "show", "type", "bridge"]);
  if (!r.ok) return [];
  return (JSON.parse(r.out || "[]") as Link[]).filter((l) => new RegExp(`^${BRIDGE_PREFIX}\\d+$`).test(l.ifname));
}

/** Deletes the bridge and every pod namespace sbx-kubelet made on it. Idempotent. */
export function teardownPodNetwork(bridge: string): void {
  const list = ip(["netns", "list"]);
  for (const line of list.out.split("\n")) {
    const name = line.split(" ")[0];
    if (name?.startsWith(`sbx-${bridge}-`)) ip(["netns", "del", name]);
  }
  ip(["link", "del", bridge]);
  if (ourBridges().length === 0) ip(["route", "del", "unreachable", POD_SUPERNET]);
}

/** Removes the networks of runs whose owner process is gone; answers their bridge names. */
export function reapStaleNetworks(): string[] {
  const reaped: string[] = [];
  for (const l of ourBridges()) {
    const owner = Number(/^sbx owner=(\d+)/.exec(l.ifalias ?? "")?.[1]);
    if (owner && alive(owner)) continue;
    teardownPodNetwork(l.ifname);
    reaped.push(l.ifname);
  }
  return reaped;
}

/** Creates this run's bridge on the first free index (concurrent runs each get their own). */
export function setupPodNetwork(runDir: string): PodNetwork {
  reapStaleNetworks();
  for (let i = 0; i < MAX_BRIDGES; i++) {
    const bridge = `${BRIDGE_PREFIX}${i}`;
    if (!ip(["link", "add", "name", bridge, "type", "bridge"]).ok) continue; // taken by another run
    const net = { bridge, cidr: `10.244.${200 + i}.0/24`, gateway: `10.244.${200 + i}.1` };
    try {
      mustIp(["link", "set", bridge, "alias", `sbx owner=${process.pid} dir=${runDir}`]);
      mustIp(["addr", "add", `${net.gateway}/24`, "dev", bridge]);
      mustIp(["link", "set", bridge, "up"]);
      // kwok's fake pod IPs of sandbox pods: an API-server proxy to one fails here instead
      // of leaving the machine through the default route. The bridges' /24s are more specific.
      mustIp(["route", "replace", "unreachable", POD_SUPERNET]);
    } catch (err) {
      teardownPodNetwork(bridge);
      throw err;
    }
    return net;
  }
  throw new Error(
    `control plane: pod network: all ${MAX_BRIDGES} bridges ${BRIDGE_PREFIX}0-${MAX_BRIDGES - 1} are in use by live runs`,
  );
}
