// The Delayed Resume variant of the pause/resume benchmark (bench/pause-data.ts --delayed; method:
// docs/benchmarks.md "Delayed resume"). Per trial: create a sandbox whose sbx.post-resume hook
// starts the port fixture server; load a payload from the seeded SHAKE256 stream and note its
// SHA-256; then either pause it (mode "paused") or leave it idle so that automatic pause
// (afterInactivity --idle-after) takes it (mode "idle"); wait --waits seconds from that moment;
// wake it, by the resume API call (wake "api") or by one HTTP request to its port through the
// service (wake "port", the request held while it wakes); time the wake, then the read-back (dd,
// SHA-256 and size must match). Asserts nothing; trials and summaries go to JSON lines.

import { readFileSync } from "node:fs";
import http from "node:http";
import { performance } from "node:perf_hooks";
import { Readable } from "node:stream";
import { NotFoundError } from "../../runtime/core/errors.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxManager } from "../../runtime/core/manager.ts";
import { hashToken, TokenStore } from "../../runtime/core/tokens.ts";
import { buildApp } from "../../runtime/server/app.ts";
import type { BenchTarget } from "./benchTarget.ts";
import { readBackScript, shText } from "./exec.ts";
import { openResults } from "./jsonl.ts";
import { BENCH_SEED, shakeStream } from "./shake.ts";
import { exitCodeFor, formatTable, summarize, type TrialRecord } from "./summary.ts";
import { singleFileTar } from "./tar.ts";
import { intFlag, runnerEnvironment } from "./target.ts";

const SERVER_PY = readFileSync(new URL("../../test/server/fixtures/port-server.py", import.meta.url));
const START_SERVER = "nohup python3 /workspace/port-server.py 8000 >/tmp/server.log 2>&1 &";
const TOKEN = "bench-delayed-0123456789";
const METRICS = ["wake_ms", "read_ms", "wake_plus_read_ms", "pause_ms"];

export interface DelayedArgs {
  waitsSeconds: number[];
  modes: ("paused" | "idle")[];
  wakes: ("api" | "port")[];
  bytes: number;
  idleAfterSeconds: number;
  trials: number;
}

function list<T extends string>(f: Map<string, string>, name: string, dflt: string, allowed: readonly T[]): T[] {
  return (f.get(name) ?? dflt).split(",").map((v) => {
    if (!allowed.includes(v as T))
      throw new Error(
        `--${name}: unknown value ${JSON.stringify(v)}: use a comma-separated list of ${allowed.join(", ")}`,
      );
    return v as T;
  });
}

export function delayedArgs(f: Map<string, string>): DelayedArgs {
  const waitsSeconds = (f.get("waits") ?? "10,60").split(",").map((w) => {
    const n = Number(w);
    if (!Number.isInteger(n) || n < 0)
      throw new Error(
        `--waits: invalid value ${JSON.stringify(w)}: use seconds as whole numbers, e.g. --waits 10,60,300`,
      );
    return n;
  });
  return {
    waitsSeconds,
    modes: list(f, "modes", "paused,idle", ["paused", "idle"] as const),
    wakes: list(f, "wakes", "api,port", ["api", "port"] as const),
    bytes: intFlag(f, "mib", 64, 1) << 20,
    idleAfterSeconds: intFlag(f, "idle-after", 3, 1),
    trials: intFlag(f, "trials", 1, 1),
  };
}

/** Where a port request goes: the in-process target's Manager behind our own app, or the server given. */
async function portService(t: BenchTarget, server?: { url: string; token?: string }) {
  if (t.kind === "server" && server)
    return { url: server.url, token: server.token ?? "", close: async () => undefined };
  const tokens = new TokenStore(new Map([[hashToken(TOKEN), t.owner]]));
  const app = buildApp({
    manager: t.manager as unknown as SandboxManager,
    tokens,
    logger: silentLogger(),
    e2b: false,
    ports: { wakeHoldMs: 300_000, connectRetryMs: 120_000, accessInMetadata: t.kind === "kubernetes" },
  });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return { url, token: TOKEN, close: () => app.close() };
}

/** One GET; resolves with the status once the whole answer is in. */
function get(url: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers: { authorization: `Bearer ${token}` }, agent: false }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      })
      .on("error", reject);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runDelayed(
  t: BenchTarget,
  a: DelayedArgs,
  o: { output?: string; server?: { url: string; token?: string } },
): Promise<number> {
  const out = openResults(o.output, "pause-delayed");
  const svc = await portService(t, o.server);
  out.write({
    type: "environment",
    benchmark: "pause-data --delayed",
    seed: BENCH_SEED,
    payload_bytes: a.bytes,
    idle_after_seconds: a.idleAfterSeconds,
    trials_per_case: a.trials,
    started_at: new Date().toISOString(),
    ...runnerEnvironment(),
    ...t.environment,
  });
  let exit = 0;
  const rows: string[] = [];
  try {
    for (const wait of a.waitsSeconds)
      for (const mode of a.modes)
        for (const wake of a.wakes) {
          const name = `${mode} ${wait}s, wake by ${wake}`;
          const trials: TrialRecord[] = [];
          for (let i = 0; i < a.trials; i++) {
            const r = await trial(t, svc, a, { wait, mode, wake }, i);
            trials.push(r);
            out.write({ ...r, case: name });
            process.stderr.write(
              `${name} trial ${i}: ${r.ok ? `wake ${r.timings.wake_ms.toFixed(0)} ms, read ${r.timings.read_ms.toFixed(0)} ms` : `FAILED at ${r.failed_stage}: ${r.error}`}\n`,
            );
          }
          const s = summarize(trials, a.trials, METRICS);
          out.write({ ...s, case: name, wait_seconds: wait, mode, wake });
          exit ||= exitCodeFor(trials, s);
          console.log(`\n== ${name} (${a.bytes} bytes) ==\n${formatTable(s)}`);
          const p50 = (m: string) => s.metrics[m]?.p50?.toFixed(0) ?? "-";
          rows.push(
            `| ${mode} | ${wait} s | ${wake} | ${p50("wake_ms")} | ${p50("read_ms")} | ${p50("wake_plus_read_ms")} | ${s.successful_trials}/${s.measured_trials} |`,
          );
        }
  } finally {
    out.close();
    await svc.close();
  }
  console.log(
    `\n| mode | wait | woken by | wake ms | read ms | wake + read ms | ok |\n|---|---|---|---|---|---|---|\n${rows.join("\n")}`,
  );
  console.log(`results: ${out.path}`);
  return exit;
}

type Case = { wait: number; mode: "paused" | "idle"; wake: "api" | "port" };

async function trial(
  t: BenchTarget,
  svc: { url: string; token: string },
  a: DelayedArgs,
  c: Case,
  index: number,
): Promise<TrialRecord & Record<string, unknown>> {
  const m = t.manager;
  const timings: Record<string, number> = {};
  const rec: TrialRecord & Record<string, unknown> = { type: "trial", index, warmup: false, ok: false, timings };
  let stage = "create";
  let id: string | undefined;
  try {
    const sb = await m.create({
      owner: t.owner,
      profile: "base",
      size: "bench",
      metadata: { "sbx.post-resume": START_SERVER },
      ...(c.mode === "idle" ? { autoPause: { pause: { afterInactivity: `${a.idleAfterSeconds}s` } } } : {}),
    });
    id = sb.id;
    rec.sandbox_id = id;
    await m.wait(t.owner, id, { timeoutMs: 5 * 60_000 });
    stage = "load";
    await m.putArchive(
      t.owner,
      id,
      "/workspace",
      singleFileTar("port-server.py", SERVER_PY.length, Readable.from([SERVER_PY])),
    );
    let sha = "";
    await m.putArchive(
      t.owner,
      id,
      "/workspace",
      singleFileTar(
        "payload.bin",
        a.bytes,
        shakeStream(BENCH_SEED, a.bytes, (h) => (sha = h)),
      ),
    );
    rec.payload_sha256 = sha;
    await shText(m, t.owner, id, "sync");
    if (c.mode === "paused") {
      stage = "pause";
      const t0 = performance.now();
      await m.pause(t.owner, id);
      timings.pause_ms = performance.now() - t0;
      await sleep(c.wait * 1000);
    } else {
      // no call at all while idle: any API call would be activity and hold the pause back
      stage = "idle";
      await sleep((a.idleAfterSeconds + c.wait) * 1000);
      let s = await m.get(t.owner, id);
      rec.phase_after_wait = s.phase;
      // taken by automatic pause but still writing its snapshot (a slow registry, a busy
      // machine): it is asleep all the same; the wake starts once it is Paused
      const t0 = performance.now();
      while (s.phase === "Pausing" && performance.now() - t0 < 5 * 60_000) {
        await sleep(250);
        s = await m.get(t.owner, id);
      }
      if (rec.phase_after_wait === "Pausing") rec.pause_settled_after_wait_ms = performance.now() - t0;
      if (s.phase !== "Paused")
        throw new Error(
          `automatic pause had not taken it ${a.idleAfterSeconds + c.wait} s after its last activity (phase ${s.phase})`,
        );
    }
    stage = `wake by ${c.wake}`;
    let t0 = performance.now();
    if (c.wake === "api") await m.resume(t.owner, id);
    else {
      const status = await get(`${svc.url}/v1/sandboxes/${id}/ports/8000/echo`, svc.token);
      if (status !== 200) throw new Error(`the port request answered ${status}`);
    }
    timings.wake_ms = performance.now() - t0;
    stage = "read";
    t0 = performance.now();
    const read = await shText(m, t.owner, id, readBackScript("/workspace/payload.bin"));
    timings.read_ms = performance.now() - t0;
    timings.wake_plus_read_ms = timings.wake_ms + timings.read_ms;
    const [gotSha, mode, size] = read.stdout.trim().split("\n");
    rec.read_mode = mode;
    if (gotSha !== sha || Number(size) !== a.bytes)
      throw new Error(`read-back mismatch: sha256 ${gotSha} size ${size}, expected ${sha} size ${a.bytes}`);
    stage = "destroy";
    await m.kill(t.owner, id);
    const gone = await m.get(t.owner, id).then(
      () => false,
      (e: unknown) => e instanceof NotFoundError || (e as { code?: string }).code === "not_found",
    );
    if (!gone) throw new Error("the sandbox is still listed after delete");
    rec.ok = true;
  } catch (err) {
    rec.failed_stage = stage;
    rec.error = (err as Error).message;
    if (id && stage !== "destroy")
      await m.kill(t.owner, id).catch((e: unknown) => (rec.cleanup_error = (e as Error).message));
  }
  return rec;
}
