// Where a replica's memory goes per open command channel, against per held websocket exec:
// N sandboxes on the test control plane, then (per phase, in the order given) one exec held in
// each (`sleep` on the websocket path: one TLS websocket each) or one channel opened in each
// (`true` over the channel, kept open: one TLS websocket each plus the channel's state). After
// each step the heap is collected and process.memoryUsage() read, so the per-sandbox deltas of
// heapUsed, external and arrayBuffers are exact and RSS carries the rest (native memory:
// OpenSSL, malloc). With --heap-snapshots DIR, a V8 heap snapshot before and after each phase
// and their difference by constructor (what grew, per sandbox). The first sandbox warms both
// paths up (code, the helper binary) and is not counted.
//   node --expose-gc --import tsx bench/k8s/channel-memory.ts [--sandboxes 200]
//     [--phases websocket,channel,close,channel] [--heap-snapshots /tmp/heap] [--max-opens 32]
// ("close" closes the open channels; a "channel" phase after it opens them again, without the
// helper copy, which the pods then have)
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { writeHeapSnapshot } from "node:v8";
import { Exec } from "@kubernetes/client-node";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { ExecSession } from "../../runtime/core/types.ts";
import { SANDBOX_CONTAINER } from "../../runtime/k8s/contract.ts";
import { createKubernetesPlatform, type KubernetesPlatform } from "../../runtime/kubernetes.ts";
import { arg, benchRuntime, table } from "./env.ts";
import { heapGrowth } from "./heapDiff.ts";

const N = Number(arg("sandboxes", "200"));
const phases = arg("phases", "websocket,channel").split(",");
const snapDir = arg("heap-snapshots", "");
// the channel backend's commandChannel.maxOpens (opens in flight at once); default its own
const maxOpens = arg("max-opens", "") ? Number(arg("max-opens", "")) : undefined;
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc: the deltas need a collected heap");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = 2 ** 20;

type Usage = {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  /** glibc's bytes in use and freed-but-kept, with the bench/k8s/mallinfo.c probe loaded (else 0) */
  mallocUsed: number;
  mallocFree: number;
};
const mallinfoFile = process.env.MALLINFO_FILE;
function mallinfo(): { mallocUsed: number; mallocFree: number } {
  if (!mallinfoFile || !existsSync(mallinfoFile)) return { mallocUsed: 0, mallocFree: 0 };
  const [, mmapped, used, free] = readFileSync(mallinfoFile, "utf8").trim().split(" ").map(Number);
  return { mallocUsed: used + mmapped, mallocFree: free };
}
/** memoryUsage after a full collection (twice, with a pause for finalizers that free native memory) */
async function settled(): Promise<Usage> {
  for (let i = 0; i < 3; i++) {
    gc?.();
    await sleep(300);
  }
  const { rss, heapTotal, heapUsed, external, arrayBuffers } = process.memoryUsage();
  return { rss, heapTotal, heapUsed, external, arrayBuffers, ...mallinfo() };
}

let snaps = 0;
const snapshot = (label: string) => {
  if (!snapDir) return undefined;
  mkdirSync(snapDir, { recursive: true });
  return writeHeapSnapshot(join(snapDir, `${String(++snaps).padStart(2, "0")}-${label}.heapsnapshot`));
};

const nodes = Math.ceil((N * 100) / 3600) + 2;
const rt = await benchRuntime(
  "bench-chmem",
  {
    budget: { cpu: String(Math.ceil(N / 10) + 2), memory: `${N}Gi` },
    defaults: { size: "nano", idleTimeoutSeconds: 0, ttlSeconds: 7200 },
  },
  nodes,
);
const deps = { logger: silentLogger(), clock: systemClock, role: "manager" as const };
// channels kept open for the whole run (idle close after an hour), and one replica without them
const channel = createKubernetesPlatform(rt.config, deps, {
  clients: rt.clients,
  identity: "bench-chmem-channel",
  commandChannel: { idleMs: 3_600_000, maxOpens },
});
const websocket = createKubernetesPlatform(rt.config, deps, {
  clients: rt.clients,
  identity: "bench-chmem-websocket",
  commandChannel: { enabled: false },
});
const out: Record<string, unknown> = { bench: "k8s-channel-memory", sandboxes: N, maxOpens: maxOpens ?? "default" };
const rows: Record<string, string | number | null>[] = [];

async function drained(s: ExecSession) {
  s.stdout.resume();
  s.stderr.resume();
  return s.result;
}

/** one row: the step's usage and its delta from `from`, per counted sandbox */
function row(step: string, from: Usage, to: Usage, per: number) {
  const kib = (k: keyof Usage) => Math.round((to[k] - from[k]) / 1024 / per);
  rows.push({
    step,
    "RSS MiB": Math.round(to.rss / MiB),
    "per sandbox KiB: rss": kib("rss"),
    heapTotal: kib("heapTotal"),
    heapUsed: kib("heapUsed"),
    external: kib("external"),
    arrayBuffers: kib("arrayBuffers"),
    "rest (native)": kib("rss") - kib("heapTotal") - kib("external"),
    ...(mallinfoFile ? { "malloc used": kib("mallocUsed"), "malloc free": kib("mallocFree") } : {}),
  });
  return {
    step,
    usage: to,
    perSandboxKiB: {
      rss: kib("rss"),
      heapTotal: kib("heapTotal"),
      heapUsed: kib("heapUsed"),
      external: kib("external"),
    },
  };
}

async function websocketPhase(ids: string[]) {
  const before = await settled();
  const s0 = snapshot("websocket-before");
  const sessions = await Promise.all(ids.map((id) => websocket.backend.exec(id, { command: ["sleep", "3600"] })));
  const results = sessions.map(drained);
  const held = await settled();
  const s1 = snapshot("websocket-held");
  const r1 = row(`${ids.length} websocket execs held`, before, held, ids.length);
  for (const s of sessions) s.kill();
  await Promise.allSettled(results);
  const r2 = row("  ... and closed", before, await settled(), ids.length);
  return { held: r1, closed: r2, heapGrowth: s0 && s1 ? heapGrowth(s0, s1) : undefined };
}

async function channelPhase(ids: string[], b: KubernetesPlatform) {
  const before = await settled();
  const s0 = snapshot("channel-before");
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 100);
  const t0 = performance.now();
  const codes = await Promise.all(
    ids.map(async (id) => (await drained(await b.backend.exec(id, { command: ["true"] }))).exitCode),
  );
  const openMs = Math.round(performance.now() - t0);
  clearInterval(timer);
  const open = ids.filter((id) => b.testing.channels.pool.current(id)).length;
  const after = await settled();
  const s1 = snapshot("channel-open");
  const r = row(`${open} channels open`, before, after, ids.length);
  return {
    ...r,
    openMs,
    peakRssDuringOpenMiB: Math.round(peak / MiB),
    exit0: codes.filter((c) => c === 0).length,
    heapGrowth: s0 && s1 ? heapGrowth(s0, s1) : undefined,
  };
}

/**
 * What the API server's exec websocket negotiates when offered permessage-deflate, as bare
 * client-node (ws's default) offers it: an accepted extension would hold zlib state per socket.
 */
async function negotiated() {
  const namespace = rt.config.kubernetes.namespace;
  const pod = (await rt.clients.core.listNamespacedPod({ namespace })).items[0]?.metadata?.name ?? "";
  const api = new Exec(rt.clients.kc);
  const ws = (await api.exec(namespace, pod, SANDBOX_CONTAINER, ["true"], null, null, null, false)) as unknown as {
    protocol: string;
    extensions: string;
    close(): void;
  };
  const seen = { protocol: ws.protocol, extensions: ws.extensions || "(none)" };
  ws.close();
  return seen;
}

/** closes the open channels (the helper stays in the pods: a later channel phase opens without copying it) */
async function closePhase(ids: string[], b: KubernetesPlatform) {
  const before = await settled();
  for (const id of ids) b.testing.channels.pool.current(id)?.close("the benchmark closed it");
  await sleep(2000);
  return row("channels closed", before, await settled(), ids.length);
}

try {
  await channel.backend.start();
  await websocket.backend.start();
  const made = await Promise.all(
    Array.from({ length: N }, (_, i) => rt.manager.create({ owner: `o${i % 20}`, profile: "base", size: "nano" })),
  );
  for (const b of [rt.backend, channel.backend, websocket.backend])
    for (let i = 0; i < 1200 && (await b.list()).filter((s) => s.ready).length < N; i++) await sleep(500);
  const [first, ...rest] = made.map((m) => m.id);
  for (const b of [channel.backend, websocket.backend]) await drained(await b.exec(first, { command: ["true"] }));
  out.negotiated = await negotiated();
  out.rssReadyMiB = Math.round(process.memoryUsage().rss / MiB);
  for (const [i, phase] of phases.entries()) {
    const key = `${i + 1}-${phase}`;
    if (phase === "websocket") out[key] = await websocketPhase(rest);
    else if (phase === "channel") out[key] = await channelPhase(rest, channel);
    else if (phase === "close") out[key] = await closePhase(rest, channel);
    else throw new Error(`--phases: unknown phase ${JSON.stringify(phase)}: use websocket, channel and close`);
  }
} finally {
  await channel.close();
  await websocket.close();
  await rt.close();
}
const growth = (phase: unknown) =>
  (phase as { heapGrowth?: { key: string; count: number; bytes: number }[] })?.heapGrowth;
console.log(JSON.stringify(out, null, 2));
console.log(table(rows));
for (const [i, p] of phases.entries()) {
  const g = growth(out[`${i + 1}-${p}`]);
  if (!g) continue;
  console.log(`\nheap growth, ${p} phase, per sandbox (top ${g.length}):`);
  const per = N - 1;
  console.log(
    table(
      g.map((x) => ({ group: x.key, count: Math.round((x.count / per) * 10) / 10, bytes: Math.round(x.bytes / per) })),
    ),
  );
}
process.exit(0);
