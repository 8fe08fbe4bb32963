// The fleet harness of bench/k8s/replicas.ts and test/k8s/replicas: N runtime replicas as
// separate processes against the test control plane, each the real service in its role on a
// free port, and the HTTP, metrics and Lease reads the scenarios and tests need. This file is
// also the replica process itself (`replicaFleet.ts replica <json>`), so what is measured is
// what is tested.
import { type ChildProcess, spawn } from "node:child_process";
import { realpathSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { Role } from "../../runtime/config/role.ts";
import type { RuntimeConfigInput } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { createLogger, silentLogger } from "../../runtime/core/log.ts";
import { hashToken, TokenStore } from "../../runtime/core/tokens.ts";
import { readShares as readShareEntries } from "../../runtime/k8s/budget/shareEntries.ts";
import type { SharesDoc } from "../../runtime/k8s/budget/sharePlan.ts";
import { sharesLeaseName } from "../../runtime/k8s/budget/sharesDoc.ts";
import type { CommandChannelOptions } from "../../runtime/k8s/channel/sandboxChannels.ts";
import type { KubeClients } from "../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "../../runtime/k8s/contract.ts";
import { createKubernetesPlatform } from "../../runtime/kubernetes.ts";
import { startService } from "../../runtime/server/service.ts";
import { adminClients, testConfig } from "../../tools/control-plane/fixtures.ts";
import { installAllocProfiler } from "./allocProfile.ts";

export const FLEET_TOKEN = "token-fleet-0123456789";
const AUTH = { authorization: `Bearer ${FLEET_TOKEN}`, "content-type": "application/json" };
/** More owners every replica knows, for tenancy (config.tenancy puts them in teams): owner -> token */
export const OWNER_TOKENS: Record<string, string> = {
  "team-a-agent": "token-fleet-team-a-0123456789",
  "team-b-agent": "token-fleet-team-b-0123456789",
};

export interface ReplicaArgs {
  kubeconfigPath: string;
  namespaces: { sandboxes: string; runtime: string };
  config: Partial<RuntimeConfigInput>;
  identity: string;
  role: Role;
  /** the backend's command channel (default on); `{ enabled: false }`: one websocket exec per command */
  commandChannel?: CommandChannelOptions;
  /** the activity flush (default 500 ms, so the fleet's tests see activity soon) */
  activityFlushMs?: number;
}

/** One replica process: the real service in the given role, on a free port; prints `READY <url>`. */
async function runReplica(a: ReplicaArgs): Promise<void> {
  installAllocProfiler(a.identity);
  const logger = process.env.SBX_TEST_LOG ? createLogger({ level: process.env.SBX_TEST_LOG }) : silentLogger();
  const ns = { ...a.namespaces, cleanup: async () => undefined };
  const config = testConfig(ns, { ...a.config, listen: { host: "127.0.0.1", port: 0 } });
  const platform = createKubernetesPlatform(
    config,
    { logger, clock: systemClock, role: a.role, identity: a.identity },
    {
      clients: adminClients(a.kubeconfigPath),
      retryPeriodMs: 500,
      leaseDurationMs: 4000,
      activityFlushMs: a.activityFlushMs ?? 500,
      ...(a.commandChannel ? { commandChannel: a.commandChannel } : {}),
    },
  );
  const service = await startService({
    config,
    tokens: new TokenStore(
      new Map([
        [hashToken(FLEET_TOKEN), "fleet"],
        ...Object.entries(OWNER_TOKENS).map(([owner, t]): [string, string] => [hashToken(t), owner]),
      ]),
    ),
    logger,
    clock: systemClock,
    platform,
    role: a.role,
    identity: a.identity,
    host: "127.0.0.1",
    port: 0,
    reaperIntervalMs: 60_000,
  });
  process.once(
    "SIGTERM",
    () =>
      void service.close().then(
        () => process.exit(0),
        () => process.exit(1),
      ),
  );
  process.stdout.write(`READY ${service.url}\n`);
}

export interface Replica {
  identity: string;
  url: string;
  role: Role;
  /** the process id, to read its RSS from /proc */
  pid: number;
  /** resolves with the signal once the process is gone */
  exited: Promise<NodeJS.Signals | number | null>;
  kill(signal: NodeJS.Signals): Promise<NodeJS.Signals | number | null>;
  stderr(): string;
}

function spawnReplica(a: ReplicaArgs, startTimeoutMs: number): Promise<Replica> {
  return spawnReadyReplica(["--import", "tsx", import.meta.filename, "replica", JSON.stringify(a)], a, {
    timeoutMs: startTimeoutMs,
  });
}

/**
 * Starts `node argv...` as replica `a` and resolves once it printed "READY <url>" (the replica
 * entry above does); rejects when it exits first or takes longer than o.timeoutMs. Its stderr's
 * tail is kept for error messages (o.stderrKeep characters).
 */
export function spawnReadyReplica(
  argv: string[],
  a: Pick<ReplicaArgs, "identity" | "role">,
  o: { timeoutMs: number; cwd?: string; env?: Record<string, string>; stderrKeep?: number },
): Promise<Replica> {
  const keep = o.stderrKeep ?? 2_000_000;
  const child: ChildProcess = spawn(process.execPath, argv, {
    ...(o.cwd ? { cwd: o.cwd } : {}),
    ...(o.env ? { env: { ...process.env, ...o.env } } : {}),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  let out = "";
  child.stderr!.on("data", (c: Buffer) => (err = (err + c.toString()).slice(-keep)));
  child.stderr!.on("error", () => undefined);
  child.stdout!.on("error", () => undefined);
  const exited = new Promise<NodeJS.Signals | number | null>((r) => child.once("exit", (code, sig) => r(sig ?? code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`replica ${a.identity} did not start in ${o.timeoutMs} ms: ${err}`));
    }, o.timeoutMs);
    child.once("error", reject);
    void exited.then((how) => {
      clearTimeout(timer);
      reject(new Error(`replica ${a.identity} exited (${how}) before it was ready: ${err}`));
    });
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /READY (\S+)\n/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      resolve({
        identity: a.identity,
        url: m[1],
        role: a.role,
        pid: child.pid ?? 0,
        exited,
        stderr: () => err,
        kill: (signal) => {
          child.kill(signal);
          return exited;
        },
      });
    });
  });
}

export interface FleetOptions extends Omit<ReplicaArgs, "identity" | "role"> {
  managers: number;
  /** also run one controller-role process (warm-pool refill, reaper) */
  controller?: boolean;
  prefix: string;
  startTimeoutMs?: number;
}

export interface Fleet {
  managers: Replica[];
  controller?: Replica;
  /** the managers still running */
  alive(): Replica[];
  close(): Promise<void>;
}

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const base = {
    kubeconfigPath: o.kubeconfigPath,
    namespaces: o.namespaces,
    config: o.config,
    commandChannel: o.commandChannel,
  };
  const t = o.startTimeoutMs ?? 180_000;
  const started = await Promise.allSettled([
    ...Array.from({ length: o.managers }, (_, i) =>
      spawnReplica({ ...base, identity: `${o.prefix}-m${i}`, role: "manager" }, t),
    ),
    ...(o.controller ? [spawnReplica({ ...base, identity: `${o.prefix}-c`, role: "controller" }, t)] : []),
  ]);
  const ok = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
  const dead = new Set<Replica>();
  for (const r of ok) void r.exited.then(() => dead.add(r));
  const close = async () => {
    await Promise.all(ok.map((r) => (dead.has(r) ? r.exited : r.kill("SIGTERM"))));
  };
  if (failed) {
    await Promise.all(ok.map((r) => r.kill("SIGKILL")));
    throw failed.reason;
  }
  const managers = ok.filter((r) => r.role === "manager");
  return {
    managers,
    controller: ok.find((r) => r.role === "controller"),
    alive: () => managers.filter((r) => !dead.has(r)),
    close,
  };
}

export interface CreateOutcome {
  status: number;
  ms: number;
  id?: string;
  /** served from the warm pool */
  warm?: boolean;
  retryAfter?: string | null;
  error?: { code: string; message: string; details?: Record<string, unknown> };
  replica: string;
}

/** owner: one of OWNER_TOKENS' owners; default the fleet's own ("fleet") */
export async function createVia(
  r: Replica,
  body: Record<string, unknown> = { size: "nano" },
  owner?: string,
): Promise<CreateOutcome> {
  const t0 = performance.now();
  const headers = owner ? { ...AUTH, authorization: `Bearer ${OWNER_TOKENS[owner]}` } : AUTH;
  try {
    const res = await fetch(`${r.url}/v1/sandboxes`, { method: "POST", headers, body: JSON.stringify(body) });
    const json = (await res.json()) as { id?: string; warm?: boolean; error?: CreateOutcome["error"] };
    const ms = performance.now() - t0;
    return {
      status: res.status,
      ms,
      id: json.id,
      warm: json.warm,
      error: json.error,
      retryAfter: res.headers.get("retry-after"),
      replica: r.identity,
    };
  } catch (err) {
    // the replica died under the request (the kill scenario): a network error, not an answer
    return {
      status: 0,
      ms: performance.now() - t0,
      error: { code: "network", message: String(err) },
      replica: r.identity,
    };
  }
}

export async function killVia(r: Replica, id: string): Promise<number> {
  const res = await fetch(`${r.url}/v1/sandboxes/${id}`, {
    method: "DELETE",
    headers: { authorization: AUTH.authorization },
  });
  await res.arrayBuffer();
  return res.status;
}

/** One labelled sample of a Prometheus text exposition, e.g. sbx_budget_used{resource="cpu_millis"}. */
export async function metricOf(r: Replica, series: string): Promise<number> {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  if (!line) throw new Error(`replica ${r.identity}: no ${series} in /metrics`);
  return Number(line.slice(series.length + 1));
}

/** Server-side create-accept quantiles from a replica's histogram (bucket upper bounds, ms). */
export async function acceptHistogram(r: Replica): Promise<Map<string, number>> {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const l of text.split("\n"))
    if (l.startsWith("sbx_create_accept_seconds_bucket"))
      out.set(l.slice(0, l.lastIndexOf(" ")), Number(l.slice(l.lastIndexOf(" ") + 1)));
  return out;
}

export async function readShares(
  clients: KubeClients,
  runtimeNamespace: string,
  leaseName = "sbx-controller",
): Promise<SharesDoc> {
  const lease = await clients.coordination.readNamespacedLease({
    name: sharesLeaseName(leaseName),
    namespace: runtimeNamespace,
  });
  return readShareEntries(lease.metadata?.annotations).doc;
}

/** Live Sandbox records (not terminal) by the replica that admitted them. */
export async function liveRecords(
  clients: KubeClients,
  namespace: string,
): Promise<{ total: number; by: Map<string, number>; quotaExceeded: number }> {
  const list = (await clients.custom.listNamespacedCustomObject({
    group: API_GROUP,
    version: API_VERSION,
    namespace,
    plural: SANDBOX_PLURAL,
  })) as {
    items: { metadata: { annotations?: Record<string, string> }; status?: { phase?: string; reason?: string } }[];
  };
  const by = new Map<string, number>();
  let total = 0;
  let quotaExceeded = 0;
  for (const cr of list.items) {
    if (cr.status?.reason === "QuotaExceeded") quotaExceeded++;
    if (cr.status?.phase === "Failed" || cr.status?.phase === "Succeeded") continue;
    total++;
    const who = cr.metadata.annotations?.["sbx.dev/admitted-by"] ?? "";
    by.set(who, (by.get(who) ?? 0) + 1);
  }
  return { total, by, quotaExceeded };
}

const isMain = (() => {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(import.meta.filename);
  } catch {
    return false;
  }
})();

if (isMain && process.argv[2] === "replica") await runReplica(JSON.parse(process.argv[3]) as ReplicaArgs);

/** Server-side create-accept quantile over replicas from their histograms: the bucket bound (ms) holding it. */
export async function serverQuantile(rs: Replica[], path: string, q: number): Promise<number | null> {
  const byLe = new Map<number, number>();
  for (const r of rs) {
    for (const [series, n] of await acceptHistogram(r).catch(() => new Map<string, number>())) {
      if (!series.includes(`path="${path}"`) || !series.includes('outcome="ok"')) continue;
      const le = /le="([^"]+)"/.exec(series)?.[1];
      if (le) byLe.set(le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le), (byLe.get(Number(le)) ?? 0) + n);
    }
  }
  const les = [...byLe.keys()].sort((a, b) => a - b);
  const total = byLe.get(Number.POSITIVE_INFINITY) ?? 0;
  const hit = les.find((le) => (byLe.get(le) ?? 0) >= q * total);
  return total === 0 || hit === undefined ? null : hit * 1000;
}
