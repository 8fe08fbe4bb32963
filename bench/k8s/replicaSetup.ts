// What every scenario of bench/k8s/replicas.ts stands on: its options, and a fresh namespace
// pair (ResourceQuota = the budget) with a fresh fleet of manager processes sharing the budget
// through the shares Lease, torn down after the scenario whatever it threw.
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import type { CommandChannelOptions } from "../../runtime/k8s/channel/sandboxChannels.ts";
import type { KubeClients } from "../../runtime/k8s/client.ts";
import { freshNamespaces } from "../../tools/control-plane/fixtures.ts";
import { type Fleet, readShares, startFleet } from "./replicaFleet.ts";

export interface BenchOptions {
  replicas: number;
  budget: number;
  burst: number;
  clients: number;
  loopSeconds: number;
  claimers: number;
  scenarios: string[];
  leaseSeconds: number;
  /** the streaming scenario: sandboxes, each with one streaming exec */
  streaming: number;
  /** how long each streaming exec prints (a line a second) */
  streamSeconds: number;
  /** "channel" (the default command channel) and/or "websocket" (one websocket exec per command) */
  streamPaths: string[];
  /** a probe create every this many ms while the execs stream */
  probeMs: number;
  /** what prints the lines in the sandbox: "read" (no forks) or "sleep" (replicasStream.ts) */
  ticker: string;
}

export type Row = Record<string, string | number | null>;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Ctx {
  o: BenchOptions;
  admin: KubeClients;
  kubeconfigPath: string;
}

export interface FleetSetup {
  /** config on top of the scenario's budget and shares */
  config?: Partial<RuntimeConfigInput>;
  /** also run a controller-role process (warm pool) */
  controller?: boolean;
  /** the replicas' backend command channel; default on */
  commandChannel?: CommandChannelOptions;
}

export async function withFleet<T>(
  c: Ctx,
  prefix: string,
  setup: FleetSetup,
  fn: (f: Fleet, ns: { sandboxes: string; runtime: string }) => Promise<T>,
): Promise<T> {
  const extra = setup.config ?? {};
  const ns = await freshNamespaces(c.admin.core, prefix);
  const cpu = `${(c.o.budget * 100) / 1000}`;
  const memory = `${c.o.budget * 128}Mi`;
  await c.admin.core.createNamespacedResourceQuota({
    namespace: ns.sandboxes,
    body: {
      metadata: { name: "sandboxes" },
      spec: {
        hard: {
          pods: String(c.o.budget + (extra.warmPool?.[0]?.count ?? 0)),
          "requests.cpu": cpu,
          "requests.memory": memory,
        },
      },
    },
  });
  const config: Partial<RuntimeConfigInput> = {
    budget: { cpu, memory },
    defaults: { size: "nano", idleTimeoutSeconds: 0 },
    kubernetes: { budgetShares: { enabled: true, leaseSeconds: c.o.leaseSeconds, tickMs: 200 } },
    ...extra,
  };
  const fleet = await startFleet({
    kubeconfigPath: c.kubeconfigPath,
    namespaces: { sandboxes: ns.sandboxes, runtime: ns.runtime },
    config,
    managers: c.o.replicas,
    controller: setup.controller ?? false,
    prefix,
    commandChannel: setup.commandChannel,
  });
  try {
    for (let i = 0; i < 300; i++) {
      const doc = await readShares(c.admin, ns.runtime).catch(() => undefined);
      const e = doc ? Object.values(doc.replicas) : [];
      if (e.length === c.o.replicas && e.every((x) => !x.want)) break;
      await sleep(100);
    }
    return await fn(fleet, ns);
  } finally {
    await fleet.close();
    await ns.cleanup();
  }
}
