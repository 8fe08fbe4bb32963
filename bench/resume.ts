// Resume benchmark (method: docs/benchmarks.md "Pause and resume"). Per trial: create, write a
// unique marker in /workspace, pause, wait until the compute is gone, optionally run a
// preparation script, then time from just before the resume call:
//   api_ack_ms  resume call returned
//   running_ms  first GET reporting Running
//   ready_ms    wait (ready) returned
//   command_ms  a foreground command printed the exact marker
// and delete. Cumulative times on a monotonic clock. JSONL (opened exclusively): an environment
// record, one fsynced record per trial (warmups included), a summary. Asserts nothing.
//
//   npx tsx bench/resume.ts [--warmups 3] [--samples 30] [--scenario uncontrolled]
//       [--prepare-script ./prepare.sh] [--output resume.jsonl] [--environment env.json]
//       [--warm 2] [--registry http://127.0.0.1:5000]
//       [--platform kubernetes]   (the test control plane: bench/k8s/env.ts or SBX_TEST_KUBECONFIG)
//       [--kubeconfig k.yaml --namespace ns --registry URL --image IMG [--runtime-namespace ns] [--runtime-class rc]]
//       [--server http://host:8080 --token T --owner alice]
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { finished } from "node:stream/promises";
import { openResults } from "./lib/jsonl.ts";
import { exitCodeFor, formatTable, summarize, type TrialRecord } from "./lib/summary.ts";
import { type BenchTarget, flags, intFlag, openTarget, runnerEnvironment, targetArgs } from "./lib/target.ts";

const METRICS = ["api_ack_ms", "running_ms", "ready_ms", "command_ms"] as const;
const MARKER_PATH = "/workspace/.sbx-bench-marker";

async function main(): Promise<number> {
  const f = flags(process.argv.slice(2));
  const warmups = intFlag(f, "warmups", 3);
  const samples = intFlag(f, "samples", 30, 1);
  const scenario = f.get("scenario") ?? "uncontrolled";
  const prepareScript = f.get("prepare-script");
  if (scenario !== "uncontrolled" && !prepareScript)
    throw new Error(`--scenario ${scenario}: needs --prepare-script that establishes and checks that condition`);
  const resumeTimeoutMs = intFlag(f, "resume-timeout-ms", 300_000, 1);
  const pollMs = intFlag(f, "poll-ms", 10, 1);
  const out = openResults(f.get("output"), "resume");
  const target = await openTarget(
    targetArgs(f, { size: f.get("size") ?? "bench", profile: f.get("profile") ?? "base", warm: intFlag(f, "warm", 2) }),
  );
  const runId = randomBytes(4).toString("hex");
  out.write({
    type: "environment",
    benchmark: "resume",
    run_id: runId,
    started_at: new Date().toISOString(),
    scenario,
    warmups,
    samples,
    prepare_script: prepareScript ?? null,
    resume_timeout_ms: resumeTimeoutMs,
    poll_ms: pollMs,
    marker_path: MARKER_PATH,
    supplied: f.get("environment") ? JSON.parse(readFileSync(f.get("environment")!, "utf8")) : null,
    ...runnerEnvironment(),
    ...target.environment,
  });
  const trials: TrialRecord[] = [];
  try {
    for (let i = 0; i < warmups + samples; i++) {
      const trial = await runTrial(target, {
        index: i,
        warmup: i < warmups,
        runId,
        scenario,
        prepareScript,
        resumeTimeoutMs,
        pollMs,
      });
      trials.push(trial);
      out.write(trial as unknown as Record<string, unknown>);
      process.stderr.write(
        `trial ${i}${trial.warmup ? " (warmup)" : ""}: ${trial.ok ? `command_ms ${trial.timings.command_ms?.toFixed(1)}` : `FAILED at ${trial.failed_stage}: ${trial.error}`}\n`,
      );
      if (trial.cleanup_error) {
        process.stderr.write(
          `cleanup failed; delete sandbox ${(trial as unknown as { sandbox_id: string }).sandbox_id} by hand (sbx kill <id>). Stopping.\n`,
        );
        break;
      }
    }
  } finally {
    const summary = summarize(trials, samples, METRICS);
    out.write(summary as unknown as Record<string, unknown>);
    out.close();
    await target.close();
    console.log(JSON.stringify(summary, null, 2));
    console.log(formatTable(summary));
    console.log(`results: ${out.path}`);
    process.exitCode = exitCodeFor(trials, summary);
  }
  return process.exitCode ?? 0;
}

interface TrialOptions {
  index: number;
  warmup: boolean;
  runId: string;
  scenario: string;
  prepareScript?: string;
  resumeTimeoutMs: number;
  pollMs: number;
}

async function runTrial(t: BenchTarget, o: TrialOptions): Promise<TrialRecord> {
  const m = t.manager;
  const timings: Record<string, number> = {};
  const rec: TrialRecord & Record<string, unknown> = {
    type: "trial",
    index: o.index,
    warmup: o.warmup,
    ok: false,
    timings,
    sandbox_id: null,
  };
  let stage = "create";
  const marker = `sbx-resume-${o.runId}-${o.index}-${randomBytes(6).toString("hex")}`;
  try {
    const sb = await m.create({ owner: t.owner, profile: "base", size: "bench", metadata: { "sbx-bench": o.runId } });
    rec.sandbox_id = sb.id;
    await m.wait(t.owner, sb.id, { timeoutMs: 300_000 });
    stage = "write-marker";
    const w = await output(m, t.owner, sb.id, ["sh", "-c", `printf '%s' "$1" > ${MARKER_PATH} && sync`, "sh", marker]);
    if (w.exitCode !== 0) throw new Error(`writing the marker exited ${w.exitCode}: ${w.stderr}`);
    stage = "pause";
    await m.pause(t.owner, sb.id);
    stage = "wait-compute-gone";
    const gone = Date.now() + 300_000;
    while (!(await t.computeGone(sb.id))) {
      if (Date.now() > gone) throw new Error("the paused sandbox still holds compute after 300 s");
      await new Promise((r) => setTimeout(r, o.pollMs));
    }
    if (t.snapshotOf) rec.snapshot = await t.snapshotOf(sb.id);
    if (t.beforeResume) rec.before_resume = await t.beforeResume();
    if (o.prepareScript) {
      stage = "prepare";
      rec.preparation_evidence = await prepare(o.prepareScript, sb.id, o.scenario);
    }
    stage = "resume";
    const deadline = performance.now() + o.resumeTimeoutMs;
    const t0 = performance.now();
    await withDeadline(m.resume(t.owner, sb.id), deadline, "resume call");
    timings.api_ack_ms = performance.now() - t0;
    stage = "running";
    for (;;) {
      const s = await withDeadline(m.get(t.owner, sb.id), deadline, "status poll");
      if (s.phase === "Running") break;
      if (s.phase === "Failed" || s.phase === "Succeeded")
        throw new Error(`sandbox became ${s.phase} (${s.reason ?? ""}) while resuming`);
      if (performance.now() > deadline) throw new Error("not Running before the resume timeout");
      await new Promise((r) => setTimeout(r, o.pollMs));
    }
    timings.running_ms = performance.now() - t0;
    stage = "ready";
    await withDeadline(
      m.wait(t.owner, sb.id, { timeoutMs: Math.max(1, deadline - performance.now()) }),
      deadline,
      "ready wait",
    );
    timings.ready_ms = performance.now() - t0;
    stage = "command";
    const r = await withDeadline(output(m, t.owner, sb.id, ["cat", MARKER_PATH]), deadline, "marker command");
    if (r.exitCode !== 0 || r.stdout !== marker)
      throw new Error(
        `marker command exited ${r.exitCode} and printed ${JSON.stringify(r.stdout.slice(0, 100))}, expected ${JSON.stringify(marker)}`,
      );
    timings.command_ms = performance.now() - t0;
    if (t.computeOf) rec.restored_compute = await t.computeOf(sb.id);
    if (t.stepsSince) rec.resume_steps = t.stepsSince(sb.id, t0);
    rec.ok = true;
  } catch (err) {
    rec.failed_stage = stage;
    rec.error = (err as Error).message;
    // a failed stage contributes no partial timings to the statistics (they stay in the record)
  }
  if (rec.sandbox_id) {
    try {
      await m.kill(t.owner, rec.sandbox_id as string);
    } catch (err) {
      rec.cleanup_error = (err as Error).message;
    }
  } else if (rec.failed_stage === "create") {
    rec.cleanup_error = `create failed without an id; look for sandboxes with metadata sbx-bench=${o.runId}`;
  }
  return rec;
}

async function output(
  m: BenchTarget["manager"],
  owner: string,
  id: string,
  command: string[],
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const s = await m.exec(owner, id, { command, timeoutMs: 60_000 });
  let stdout = "";
  let stderr = "";
  s.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  s.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const [r] = await Promise.all([
    s.result,
    finished(s.stdout).catch(() => undefined),
    finished(s.stderr).catch(() => undefined),
  ]);
  return { exitCode: r.exitCode, stdout, stderr };
}

function withDeadline<T>(p: Promise<T>, deadline: number, what: string): Promise<T> {
  const left = deadline - performance.now();
  if (left <= 0) return Promise.reject(new Error(`${what}: the shared resume timeout passed`));
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: the shared resume timeout passed`)), left)),
    ),
  ]).finally(() => clearTimeout(timer));
}

function prepare(script: string, id: string, scenario: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(script, [id, scenario], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => c.kill("SIGKILL"), 120_000);
    c.on("error", reject);
    c.on("close", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out.trim().slice(0, 4000));
      else reject(new Error(`prepare script ${script} exited ${code}: ${err.trim().slice(0, 500)}`));
    });
  });
}

main().catch((err: unknown) => {
  console.error(`resume benchmark: ${(err as Error).message}`);
  process.exit(2);
});
