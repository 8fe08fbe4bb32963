// The design notes' realistic case on N replicas (bench/k8s/replicas.ts --streaming): about 500
// sandboxes created round-robin over the manager processes, each running one long streaming exec
// through the replica that created it (a line a second), and while they stream, creates at a
// steady open-loop rate spread over the replicas. The notes' single 2-core replica saw its
// server-side create-accept p50 reach <= 2.5 s with ~500 streaming waits and execs through it;
// the target over the replicas is p50 <= 50 ms.
//
// Per path: "channel" is the default command channel (one long-lived exec per sandbox and
// replica; its first command opens it, run apart and timed as `open`), "websocket" the per-exec
// path (`commandChannel: { enabled: false }` in the replicas' backend). Create-accept is read
// three ways: server-side from the replicas' own histograms, counted over the probe window only
// (bench/lib/histogramWindow.ts): Manager.create (sbx_create_accept_seconds) and the service's
// whole request (sbx_http_request_seconds); and client-side as the HTTP round trip from this
// process, which shares the machine and also sees the time a request waits for a busy replica's
// event loop before the service starts timing it.
import { performance } from "node:perf_hooks";
import { ExecFrameTally } from "../lib/execFrames.ts";
import {
  bucketDelta,
  bucketQuantile,
  bucketTotal,
  parseBuckets,
  sampleOf,
  sumBuckets,
} from "../lib/histogramWindow.ts";
import { planProbes } from "../lib/planProbes.ts";
import { stats } from "./env.ts";
import { type CreateOutcome, createVia, type Fleet, killVia, type Replica, readShares } from "./replicaFleet.ts";
import { type Ctx, type Row, sleep, withFleet } from "./replicaSetup.ts";
import {
  cpuSeconds,
  leasePutsByCode,
  rssMiB,
  sampleMachine,
  scrape,
  streamExecVia,
  waitVia,
} from "./replicaStreams.ts";

const ELD_P99 = "sbx_process_nodejs_eventloop_lag_p99_seconds";
const ACCEPT = "sbx_create_accept_seconds";
const ms = (s: number | null) => (s === null ? null : Number.isFinite(s) ? Math.round(s * 1000 * 100) / 100 : "> 60 s");
const perReplica = (xs: (number | null | undefined)[]) => xs.map((x) => x ?? "-").join(" / ");

/** each replica's event-loop delay p99 (ms) since its previous scrape; scraping resets it */
async function scrapeAll(rs: readonly Replica[]) {
  const texts = await Promise.all(rs.map(scrape));
  return {
    texts,
    eldP99Ms: texts.map((t) => {
      const v = sampleOf(t, ELD_P99);
      return v === undefined ? null : Math.round(v * 1000);
    }),
  };
}

function tickBytes(seconds: number): number {
  let n = 0;
  for (let i = 1; i <= seconds; i++) n += `tick ${i}\n`.length;
  return n;
}

/** the sandboxes, created round-robin at once, then waited for through the replica that made each */
async function bringUp(c: Ctx, rs: readonly Replica[]) {
  const t0 = performance.now();
  const refused: CreateOutcome[] = [];
  // a 429 is retried after its Retry-After, as a client would: the shares move to demand
  const create = async (r: Replica): Promise<CreateOutcome> => {
    for (let attempt = 1; ; attempt++) {
      const o = await createVia(r);
      if (o.status !== 429 || attempt === 10) return o;
      refused.push(o);
      await sleep(Number(o.retryAfter ?? 1) * 1000);
    }
  };
  const made = await Promise.all(Array.from({ length: c.o.streaming }, (_, i) => create(rs[i % rs.length])));
  const acceptAllMs = Math.round(performance.now() - t0);
  const ok = made.filter((o): o is CreateOutcome & { id: string } => o.status === 201 && !!o.id);
  const byName = new Map(rs.map((r) => [r.identity, r]));
  const waits = await Promise.all(ok.map((o) => waitVia(byName.get(o.replica)!, o.id, 900)));
  const ready = ok.filter((_, i) => waits[i] === 200).map((o) => ({ id: o.id, r: byName.get(o.replica)! }));
  return {
    admitted: ok.length,
    refusals: refusals([...refused, ...made]),
    ready,
    acceptAllMs,
    readyMs: Math.round(performance.now() - t0),
  };
}

type Target = { id: string; r: Replica };

/** refusals by why: "429 replica_share: 3, 0 network: 1" */
function refusals(outcomes: readonly CreateOutcome[]): string {
  const by: Record<string, number> = {};
  for (const o of outcomes) {
    if (o.status === 201) continue;
    const k = `${o.status} ${String(o.error?.details?.reason ?? o.error?.code ?? "?")}`;
    by[k] = (by[k] ?? 0) + 1;
  }
  return Object.entries(by)
    .map(([k, n]) => `${k}: ${n}`)
    .join(", ");
}

/** creates on the open-loop schedule; each admitted one is killed at once (not awaited) */
async function probe(rs: readonly Replica[], windowMs: number, everyMs: number): Promise<CreateOutcome[]> {
  const t0 = performance.now();
  return Promise.all(
    planProbes(windowMs, everyMs, rs.length).map(async (p) => {
      await sleep(Math.max(0, t0 + p.atMs - performance.now()));
      const r = rs[p.replica];
      const o = await createVia(r);
      if (o.id) void killVia(r, o.id).catch(() => undefined);
      return o;
    }),
  );
}

interface Running {
  tally: ExecFrameTally;
  ended: boolean;
}

const streaming = (xs: readonly Running[]) => xs.filter((x) => x.tally.firstOutputAt !== undefined && !x.ended).length;

/**
 * The command each sandbox streams: a line a second for S seconds. "read" waits on a FIFO held
 * open by the shell itself (bash's `read -t 1`), so the loop forks nothing: on this machine the
 * simulated nodes share the 2 cores with the control plane, and 500 `sleep` processes a second
 * (the "sleep" ticker, bench/k8s/scale.ts's) are node work that a real cluster runs elsewhere.
 */
export function tickerCommand(seconds: number, ticker: string): string[] {
  if (ticker === "sleep") return ["sh", "-c", `for i in $(seq ${seconds}); do echo "tick $i"; sleep 1; done`];
  if (ticker === "read")
    return [
      "bash",
      "-c",
      `f=$(mktemp -u) && mkfifo "$f" && exec 3<>"$f" && rm "$f" && for ((i=1; i<=${seconds}; i++)); do echo "tick $i"; read -t 1 -u 3 || :; done`,
    ];
  throw new Error(`--ticker: unknown ticker ${JSON.stringify(ticker)}; use read (no forks) or sleep`);
}

/** each replica's CPU over a span, in cores */
function cpuCores(rs: readonly Replica[], from: (number | undefined)[], spanMs: number): string {
  return perReplica(
    rs.map((r, i) => {
      const a = from[i];
      const b = cpuSeconds(r.pid);
      return a === undefined || b === undefined ? null : Math.round(((b - a) / (spanMs / 1000)) * 100) / 100;
    }),
  );
}

/**
 * Server-side latency of the admitted probes, from the replicas' histograms between two scrapes:
 * `sbx_create_accept_seconds` is Manager.create (admission to accepted handle);
 * `sbx_http_request_seconds` is the service's whole request, from fastify's onRequest to the
 * response (what the design notes' service histogram timed; neither sees the socket's queue)
 */
function acceptWindow(before: string[], after: string[]) {
  const window = (name: string, labels: Record<string, string>) =>
    sumBuckets(after.map((t, i) => bucketDelta(parseBuckets(t, name, labels), parseBuckets(before[i], name, labels))));
  const accept = window(ACCEPT, { path: "cold", outcome: "ok" });
  const http = window("sbx_http_request_seconds", { route: "/v1/sandboxes", method: "POST", status: "201" });
  // creates that found their replica fenced by a late share renewal and waited for it
  const waited = (outcome: string) => bucketTotal(window("sbx_admission_renewal_wait_seconds", { outcome }));
  return {
    renewalWaits: `renewed ${waited("renewed")} / fenced ${waited("fenced")}`,
    serverCounted: bucketTotal(accept),
    serverP50ms: ms(bucketQuantile(accept, 0.5)),
    serverP99ms: ms(bucketQuantile(accept, 0.99)),
    httpP50ms: ms(bucketQuantile(http, 0.5)),
    httpP99ms: ms(bucketQuantile(http, 0.99)),
  };
}

function verdictsOf(done: readonly { tally: ExecFrameTally }[], seconds: number) {
  const v: Record<string, number> = {};
  for (const x of done) {
    const k = x.tally.verdict(tickBytes(seconds));
    v[k] = (v[k] ?? 0) + 1;
  }
  const other = Object.entries(v).filter(([k]) => k !== "complete" && k !== "timed out");
  return {
    complete: v.complete ?? 0,
    timedOut: v["timed out"] ?? 0,
    otherVerdicts: other.map(([k, n]) => `${k}: ${n}`).join(", "),
  };
}

/**
 * The longest time (s) each replica went without a successful share write during the window, seen
 * from outside: its entry's `beat` in the shares Lease changes with every write it lands. Past
 * half a lease (7.5 s at the default) the replica has fenced itself and answers 429.
 */
function watchShareBeats(rs: readonly Replica[], beats: () => Promise<Record<string, number>>) {
  const last = new Map<string, { beat: number; at: number }>();
  const gap = new Map<string, number>();
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try {
      const now = performance.now();
      for (const [id, beat] of Object.entries(await beats())) {
        const l = last.get(id);
        if (!l || l.beat !== beat) last.set(id, { beat, at: now });
        else gap.set(id, Math.max(gap.get(id) ?? 0, now - l.at));
      }
    } catch {
      // a failed read is a missing sample, not a gap
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void tick(), 500);
  return () => {
    clearInterval(timer);
    return perReplica(rs.map((r) => Math.round((gap.get(r.identity) ?? 0) / 100) / 10));
  };
}

/** the streaming execs, all at once, with probe creates while every one of them streams */
async function streamRound(
  c: Ctx,
  rs: readonly Replica[],
  targets: readonly Target[],
  beats: () => Promise<Record<string, number>>,
) {
  const S = c.o.streamSeconds;
  const body = { command: tickerCommand(S, c.o.ticker), timeoutMs: (S + 120) * 1000 };
  await scrapeAll(rs); // resets each replica's event-loop delay histogram
  const machine = sampleMachine(rs);
  const cpuLaunch = rs.map((r) => cpuSeconds(r.pid));
  const deadline = AbortSignal.timeout((S + 180) * 1000);
  const launched = performance.now();
  const running: Running[] = targets.map(() => ({ tally: new ExecFrameTally(), ended: false }));
  const execs = Promise.all(
    targets.map((t, i) =>
      streamExecVia(t.r, t.id, body, deadline, running[i].tally).finally(() => (running[i].ended = true)),
    ),
  );
  // the window opens once every exec printed (at most a third of the run in) and closes 2 s
  // before the first ones end, so the probes are sent while they all stream
  while (performance.now() - launched < (S * 1000) / 3 && streaming(running) < targets.length) await sleep(200);
  const opened = performance.now();
  const atOpen = streaming(running);
  const launchCpu = cpuCores(rs, cpuLaunch, opened - launched);
  const before = await scrapeAll(rs);
  const cpuOpen = rs.map((r) => cpuSeconds(r.pid));
  const windowMs = Math.max(0, launched + S * 1000 - 2000 - opened);
  const shareGaps = watchShareBeats(rs, beats);
  const puts0 = await leasePutsByCode(c.admin);
  let minStreaming = atOpen;
  const watch = setInterval(() => {
    // a sample this process took late (its own event loop is on the same 2 cores) is past the window
    if (performance.now() <= opened + windowMs) minStreaming = Math.min(minStreaming, streaming(running));
  }, 500);
  const probes = probe(rs, windowMs, c.o.probeMs);
  await sleep(windowMs);
  clearInterval(watch);
  const longestShareGapS = shareGaps();
  const puts1 = await leasePutsByCode(c.admin);
  const closed = await scrapeAll(rs); // event-loop delay over the window
  const windowCpu = cpuCores(rs, cpuOpen, performance.now() - opened);
  const sent = await probes; // the last answers may come after the window
  const after = await scrapeAll(rs);
  const done = await execs;
  const m = machine.stop();
  const firstOutput = stats(done.flatMap((x) => (x.tally.firstOutputAt ? [x.tally.firstOutputAt - x.startedAt] : [])));
  const client = stats(sent.filter((o) => o.status === 201).map((o) => o.ms));
  return {
    windowS: Math.round(windowMs / 100) / 10,
    streamingAtOpen: atOpen,
    minStreaming,
    probes: sent.length,
    probeAdmitted: sent.filter((o) => o.status === 201).length,
    probeRefusals: refusals(sent),
    longestShareGapS,
    // every Lease in the cluster (the shares Lease is the only one written this often)
    leasePutsInWindow: Object.entries(puts1)
      .map(([code, n]) => `${code}: ${n - (puts0[code] ?? 0)}`)
      .join(", "),
    refusedByReplica: perReplica(
      rs.map((r) => sent.filter((o) => o.replica === r.identity && o.status !== 201).length),
    ),
    ...acceptWindow(before.texts, after.texts),
    clientP50ms: client.p50,
    clientP99ms: client.p99,
    ...verdictsOf(done, S),
    firstOutputP50ms: firstOutput.p50,
    firstOutputP99ms: firstOutput.p99,
    rssPeakMiB: perReplica(m.peakRssMiB),
    cpuCoresLaunch: launchCpu,
    cpuCoresWindow: windowCpu,
    loopP99LaunchMs: perReplica(before.eldP99Ms),
    loopP99WindowMs: perReplica(closed.eldP99Ms),
    load1: `${m.load1.first} / ${m.load1.max} / ${m.load1.last}`,
  };
}

/**
 * With SBX_TEST_LOG set (the replicas then log to stderr), why share rounds failed: the ledger's
 * renewals are what decide fencing. Empty without logs.
 */
function shareRoundFailures(rs: readonly Replica[]): string {
  if (!process.env.SBX_TEST_LOG) return "";
  const why: Record<string, number> = {};
  for (const r of rs)
    for (const line of r.stderr().split("\n")) {
      if (!line.includes("share round failed")) continue;
      const err = /"err":"([^"]{0,60})/.exec(line)?.[1] ?? "?";
      why[err] = (why[err] ?? 0) + 1;
    }
  return Object.entries(why)
    .map(([k, n]) => `${k}: ${n}`)
    .join("; ");
}

/** one path: a fresh fleet and namespace, the sandboxes up, (channel) opened, then the round */
export async function streamPath(c: Ctx, path: string): Promise<Row> {
  if (path !== "channel" && path !== "websocket")
    throw new Error(`--streamPaths: unknown path ${JSON.stringify(path)}; use channel and/or websocket`);
  if (!(Number.isInteger(c.o.streaming) && c.o.streaming > 0 && c.o.streaming <= c.o.budget - 20))
    throw new Error(
      `--streaming: ${c.o.streaming} sandboxes do not fit --budget ${c.o.budget} with room for the probe creates; use 1 to ${c.o.budget - 20}, or raise --budget`,
    );
  if (!(c.o.streamSeconds >= 10))
    throw new Error(`--streamSeconds: ${c.o.streamSeconds} leaves no window for the probes; use 10 or more`);
  tickerCommand(c.o.streamSeconds, c.o.ticker); // refuses an unknown --ticker before anything starts
  const setup = path === "websocket" ? { commandChannel: { enabled: false } } : {};
  return withFleet(c, `brep-stream-${path.slice(0, 2)}`, setup, async (f: Fleet, ns) => {
    const beats = async () =>
      Object.fromEntries(
        Object.entries((await readShares(c.admin, ns.runtime)).replicas).map(([id, e]) => [id, e.beat]),
      );
    const rs = f.managers;
    const up = await bringUp(c, rs);
    const rssReadyMiB = perReplica(rs.map((r) => rssMiB(r.pid)));
    let openS: number | null = null;
    let openFailed = 0;
    if (path === "channel") {
      const t0 = performance.now();
      const first = await Promise.all(up.ready.map((t) => streamExecVia(t.r, t.id, { command: ["true"] })));
      openS = Math.round((performance.now() - t0) / 100) / 10;
      openFailed = first.filter((x) => x.tally.verdict(0) !== "complete").length;
    }
    const round = await streamRound(c, rs, up.ready, beats);
    return {
      scenario: `stream ${path}`,
      sandboxes: c.o.streaming,
      admitted: up.admitted,
      refusals: up.refusals,
      ready: up.ready.length,
      acceptAllMs: up.acceptAllMs,
      readyS: Math.round(up.readyMs / 100) / 10,
      rssReadyMiB,
      openS,
      openFailed,
      ...round,
      shareRoundFailures: shareRoundFailures(rs),
    };
  });
}
