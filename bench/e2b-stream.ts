// Large output through the E2B command stream against our own exec of the same output (issue 32):
// the real SDK's `commands.run` of a command writing 8, 16, 32 and 64 MB of stdout, and our
// API's `/v1` exec of the same command line (`/bin/bash -l -c ...`, as the SDK sends it, the
// whole NDJSON response read), on the same sandbox and service, interleaved round by round, on
// a quiet machine and then with CPU-bound processes (`yes`) beside the service. The target: every
// size finishes within 3x our own exec, quiet and contended. Everything goes over a real socket.
//   npx tsx bench/e2b-stream.ts [--rounds 3] [--busy 4] [--sizes 8,16,32,64] [--service child|inproc]
// --service child (the default) runs the service in a process of its own, as `npm start` does;
// inproc runs it in this process, beside the SDK. The contended phase's `yes` processes run in
// process groups of their own under `timeout 900` and are killed when the phase ends, whatever
// happens. Prints JSON, then a table. Needs root (real sandboxes). Asserts nothing.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { systemClock } from "../runtime/core/clock.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { createLocalBackend } from "../runtime/local/backend.ts";
import { startService } from "../runtime/server/service.ts";

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? dflt) : dflt;
};
const ROUNDS = Number(arg("rounds", "3"));
const BUSY = Number(arg("busy", "4"));
const SIZES_MB = arg("sizes", "8,16,32,64").split(",").map(Number);
const SERVICE = arg("service", "child");
const TOKEN = "sbx_bench_e2b_stream_0123456789";
const MB = 1024 * 1024;
/** a run that takes this long has stalled; it counts as a failure, not as a time */
const DEADLINE_MS = 300_000;

if (!["child", "inproc"].includes(SERVICE)) throw new Error(`--service ${SERVICE}: use child or inproc`);
if (SIZES_MB.some((s) => !(s > 0))) throw new Error(`--sizes ${arg("sizes", "")}: use sizes in MB, e.g. 8,16`);

interface Running {
  url: string;
  close(): Promise<void>;
}

/** The service on the local platform, in this process. */
async function serve(): Promise<Running> {
  const logger = silentLogger();
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), "bench"]]));
  const stateDir = mkdtempSync(join(os.tmpdir(), "sbx-bench-e2b-stream-"));
  const config = validateRuntimeConfig({ local: { stateDir }, listen: { host: "127.0.0.1", port: 0 }, warmPool: [] });
  const backend = createLocalBackend(config, { logger, clock: systemClock });
  const service = await startService({ config, tokens, logger, clock: systemClock, backend, port: 0 });
  return {
    url: service.url,
    close: async () => {
      await service.close();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** `--serve`: the child's side. Prints the URL, serves until its stdin closes. */
async function serveChild(): Promise<void> {
  const s = await serve();
  console.log(JSON.stringify({ url: s.url }));
  process.stdin.resume();
  await new Promise((r) => process.stdin.once("end", r));
  await s.close();
}

/** The service in a process of its own (this script with --serve); its URL once it listens. */
async function serveInChild(): Promise<Running> {
  const self = fileURLToPath(import.meta.url);
  const child = spawn(process.execPath, ["--import", "tsx", self, "--serve"], { stdio: ["pipe", "pipe", "inherit"] });
  child.stdin.on("error", () => undefined);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    lines.on("line", (l) => {
      if (l.startsWith('{"url":')) resolve((JSON.parse(l) as { url: string }).url);
      else process.stderr.write(`${l}\n`);
    });
    child.once("exit", (code) => reject(new Error(`the service process exited (${code}) before it listened`)));
  });
  return {
    url,
    close: async () => {
      child.stdin.end();
      await exited;
    },
  };
}

/** BUSY CPU-bound processes for as long as fn runs; killed after, whatever fn does. */
async function contended<T>(fn: () => Promise<T>): Promise<T> {
  const busy: ChildProcess[] = [];
  const killAll = () => {
    for (const c of busy) if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(-c.pid, "SIGKILL");
  };
  process.once("exit", killAll);
  try {
    for (let i = 0; i < BUSY; i++) {
      const c = spawn("timeout", ["900", "yes"], { stdio: "ignore", detached: true });
      busy.push(c);
      await new Promise<void>((resolve, reject) => {
        c.once("spawn", resolve);
        c.once("error", reject);
      });
    }
    return await fn();
  } finally {
    killAll();
    process.off("exit", killAll);
  }
}

const command = (bytes: number) => `yes 0123456789abcdef | head -c ${bytes}`;

/** our API's exec, the whole NDJSON response read */
async function apiExec(url: string, id: string, bytes: number): Promise<void> {
  const res = await fetch(`${url}/v1/sandboxes/${id}/exec`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ command: ["/bin/bash", "-l", "-c", command(bytes)] }),
    signal: AbortSignal.timeout(DEADLINE_MS),
  });
  const body = await res.text();
  if (res.status !== 200 || !body.includes('"exitCode":0')) throw new Error(`exec: ${res.status} ${body.slice(-300)}`);
}

async function e2bRun(sbx: Sandbox, bytes: number): Promise<void> {
  const r = await sbx.commands.run(command(bytes), { timeoutMs: DEADLINE_MS });
  if (r.stdout.length !== bytes) throw new Error(`commands.run: ${r.stdout.length} of ${bytes} bytes`);
}

/** ms, or null for a run that failed (a stall past the deadline, an error) */
async function timed(run: () => Promise<void>, errors: string[]): Promise<number | null> {
  const t0 = performance.now();
  try {
    await run();
    return performance.now() - t0;
  } catch (err) {
    errors.push(String((err as Error).message ?? err).slice(0, 200));
    return null;
  }
}

const round = (x: number) => Math.round(x);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s[Math.floor((s.length - 1) / 2)]!;
};

interface Row {
  load: "quiet" | "contended";
  sizeMB: number;
  e2bMs: (number | null)[];
  execMs: (number | null)[];
  e2bMedianMs: number | null;
  execMedianMs: number | null;
  /** e2b median / exec median; null when either had no successful run */
  ratio: number | null;
  /** the worst per-round e2b/exec ratio (a failed e2b run makes it null) */
  worstRoundRatio: number | null;
  within3x: boolean;
  loadAvg: number;
}

async function phase(url: string, sbx: Sandbox, load: Row["load"], errors: string[]): Promise<Row[]> {
  const rows: Row[] = [];
  for (const sizeMB of SIZES_MB) {
    const bytes = sizeMB * MB;
    const e2bMs: (number | null)[] = [];
    const execMs: (number | null)[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      // alternate which goes first, so a load change within a round moves both alike
      const pair = [
        () => timed(() => e2bRun(sbx, bytes), errors),
        () => timed(() => apiExec(url, sbx.sandboxId, bytes), errors),
      ];
      const [a, b] = i % 2 === 0 ? [pair[0]!, pair[1]!] : [pair[1]!, pair[0]!];
      const first = await a();
      const second = await b();
      e2bMs.push(i % 2 === 0 ? first : second);
      execMs.push(i % 2 === 0 ? second : first);
    }
    const ok = (xs: (number | null)[]) => xs.filter((x): x is number => x !== null);
    const e2bMedianMs = median(ok(e2bMs));
    const execMedianMs = median(ok(execMs));
    const ratio = e2bMedianMs !== null && execMedianMs ? e2bMedianMs / execMedianMs : null;
    const perRound = e2bMs.map((e, i) => (e === null || !execMs[i] ? null : e / execMs[i]!));
    const worstRoundRatio = perRound.includes(null) ? null : Math.max(...(perRound as number[]));
    const row: Row = {
      load,
      sizeMB,
      e2bMs: e2bMs.map((x) => (x === null ? null : round(x))),
      execMs: execMs.map((x) => (x === null ? null : round(x))),
      e2bMedianMs: e2bMedianMs === null ? null : round(e2bMedianMs),
      execMedianMs: execMedianMs === null ? null : round(execMedianMs),
      ratio: ratio === null ? null : Math.round(ratio * 100) / 100,
      worstRoundRatio: worstRoundRatio === null ? null : Math.round(worstRoundRatio * 100) / 100,
      within3x: !e2bMs.includes(null) && ratio !== null && ratio <= 3,
      loadAvg: Math.round(os.loadavg()[0] * 10) / 10,
    };
    rows.push(row);
    process.stderr.write(`${JSON.stringify(row)}\n`);
  }
  return rows;
}

async function measure(url: string): Promise<void> {
  const loadAvgAtStart = os.loadavg()[0];
  const sbx = await Sandbox.create("base", {
    apiKey: TOKEN,
    apiUrl: url,
    sandboxUrl: url,
    requestTimeoutMs: 150_000,
    timeoutMs: 3_600_000,
  });
  const errors: string[] = [];
  let rows: Row[];
  try {
    await e2bRun(sbx, MB); // warm-up: the sandbox's first bash, the SDK's connection
    await apiExec(url, sbx.sandboxId, MB);
    const quiet = await phase(url, sbx, "quiet", errors);
    const busy = await contended(() => phase(url, sbx, "contended", errors));
    rows = [...quiet, ...busy];
  } finally {
    await sbx.kill();
  }
  const result = {
    bench: "e2b-stream",
    service: SERVICE,
    rounds: ROUNDS,
    busyProcesses: BUSY,
    node: process.version,
    cpus: os.cpus().length,
    loadAvgAtStart,
    loadAvgAtEnd: os.loadavg()[0],
    allWithin3x: rows.every((r) => r.within3x),
    errors,
    rows,
  };
  console.log(JSON.stringify(result));
  console.log(
    "\n| load | MB | e2b commands.run ms (median) | /v1 exec ms (median) | ratio | worst round | within 3x |\n|---|---|---|---|---|---|---|",
  );
  for (const r of rows)
    console.log(
      `| ${r.load} | ${r.sizeMB} | ${r.e2bMedianMs ?? "failed"} | ${r.execMedianMs ?? "failed"} | ${r.ratio ?? "-"} | ${r.worstRoundRatio ?? "-"} | ${r.within3x ? "yes" : "NO"} |`,
    );
  console.log(
    `\n${ROUNDS} rounds per cell, ${BUSY} busy processes when contended, service ${SERVICE}, ${os.cpus().length} cores`,
  );
}

if (process.argv.includes("--serve")) {
  await serveChild();
} else {
  const running = SERVICE === "child" ? await serveInChild() : await serve();
  try {
    await measure(running.url);
  } finally {
    await running.close();
  }
}
