// Pause/resume data benchmark (method: docs/benchmarks.md "Pause and resume"). Per trial:
// create; load a payload from the seeded SHAKE256 stream (seed 20261004) and note its SHA-256;
// settle; time pause, resume, and a read-back (dd, iflag=direct where the filesystem allows)
// that must reproduce the SHA-256 and byte count; destroy and confirm. In every trial, right
// before the pause and right before the resume, the raw push (resp. pull) throughput of the
// same registry for the same payload size, so each operation is compared with what the
// registry itself does under the same conditions (load on a shared machine drifts within a
// run). Asserts nothing.
//
//   npx tsx bench/pause-data.ts [--variants empty,mem1g,disk1g,disk2g,disk4g] [--trials 3]
//       [--settle-seconds 60] [--output out.jsonl] [--warm 1]
//       [--platform kubernetes [--pod-layers [--registry-tokens]] | --kubeconfig k.yaml --namespace ns --registry URL --image IMG]
//       [--server URL --token T --registry URL]
//   npx tsx bench/pause-data.ts --delayed [--waits 10,60] [--modes paused,idle] [--wakes api,port]
//       [--mib 64] [--idle-after 3] [--trials 1] [--output out.jsonl] [target flags as above]
// --registry-tokens (with --pod-layers, test cluster): snapshots into the boot's registry in token mode,
// each pod with a token for its own repository (snapshots.tokenAuth); the raw baseline logs in too.
// --pod-layers (Kubernetes): the pods push and pull their own snapshot layers (snapshots.podRegistry
// set to the registry; runtime/k8s/podLayers.ts), instead of the replica moving them over exec.
// --delayed is the Delayed Resume variant (bench/lib/delayedResume.ts): paused, or left idle until
// automatic pause takes it, for each wait; then woken by the API or by a request to a port.
import { performance } from "node:perf_hooks";
import { NotFoundError } from "../runtime/core/errors.ts";
import { delayedArgs, runDelayed } from "./lib/delayedResume.ts";
import { readBackScript, shText } from "./lib/exec.ts";
import { openResults } from "./lib/jsonl.ts";
import { rawThroughput } from "./lib/rawRegistry.ts";
import { BENCH_SEED, shakeStream } from "./lib/shake.ts";
import { exitCodeFor, formatTable, summarize, type TrialRecord } from "./lib/summary.ts";
import { singleFileTar } from "./lib/tar.ts";
import { type BenchTarget, flags, intFlag, openTarget, runnerEnvironment, targetArgs } from "./lib/target.ts";

const GiB = 1 << 30;
interface Variant {
  name: string;
  dir: string;
  bytes: number;
  /** where the bytes live while running */
  medium: "disk" | "memory";
}
const VARIANTS: Record<string, Variant> = {
  empty: { name: "empty", dir: "/workspace", bytes: 4096, medium: "disk" },
  // tmpfs: charged to the sandbox's memory. Pause keeps files, not process memory (docs/pause-resume.md).
  mem1g: { name: "mem1g", dir: "/tmp", bytes: GiB, medium: "memory" },
  disk1g: { name: "disk1g", dir: "/workspace", bytes: GiB, medium: "disk" },
  disk2g: { name: "disk2g", dir: "/workspace", bytes: 2 * GiB, medium: "disk" },
  disk4g: { name: "disk4g", dir: "/workspace", bytes: 4 * GiB, medium: "disk" },
};
const METRICS = [
  "pause_ms",
  "resume_ms",
  "read_ms",
  "resume_plus_read_ms",
  "pause_MBps",
  "resume_MBps",
  "raw_push_MBps",
  "raw_pull_MBps",
  "pause_vs_raw_push",
  "resume_vs_raw_pull",
  "raw_pull_extract_MBps",
  "resume_vs_raw_pull_extract",
];
/** below this a raw baseline measures round trips, not throughput */
const RAW_MIN_BYTES = 64 << 20;

async function main(): Promise<void> {
  const f = flags(process.argv.slice(2));
  if (f.has("delayed")) return delayed(f);
  const variants = (f.get("variants") ?? "empty,mem1g,disk1g,disk2g,disk4g").split(",").map((v) => {
    const x = VARIANTS[v];
    if (!x)
      throw new Error(`--variants: unknown variant ${JSON.stringify(v)}: use ${Object.keys(VARIANTS).join(", ")}`);
    return x;
  });
  const trialsPer = intFlag(f, "trials", 3, 1);
  const settleMs = intFlag(f, "settle-seconds", 60) * 1000;
  const out = openResults(f.get("output"), "pause-data");
  const target = await openTarget(
    targetArgs(f, {
      size: "bench",
      profile: "base",
      warm: intFlag(f, "warm", 1),
      workspace: "10Gi",
      tmp: "1100Mi",
      memoryLimit: "3Gi",
    }),
  );
  out.write({
    type: "environment",
    benchmark: "pause-data",
    seed: BENCH_SEED,
    trials_per_variant: trialsPer,
    settle_ms: settleMs,
    started_at: new Date().toISOString(),
    ...runnerEnvironment(),
    ...target.environment,
  });
  const summaries: Record<string, unknown> = {};
  let exit = 0;
  try {
    for (const v of variants) {
      const trials: TrialRecord[] = [];
      for (let i = 0; i < trialsPer; i++) {
        const t = await trial(target, v, i, settleMs);
        trials.push(t);
        out.write({ ...t, variant: v.name } as Record<string, unknown>);
        process.stderr.write(
          `${v.name} trial ${i}: ${t.ok ? `pause ${t.timings.pause_ms.toFixed(0)} ms, resume ${t.timings.resume_ms.toFixed(0)} ms, read ${t.timings.read_ms.toFixed(0)} ms` : `FAILED at ${t.failed_stage}: ${t.error}`}\n`,
        );
        if (t.cleanup_error)
          throw new Error(
            `cleanup failed; delete sandbox ${(t as unknown as { sandbox_id: string }).sandbox_id} by hand`,
          );
      }
      const s = summarize(trials, trialsPer, METRICS);
      summaries[v.name] = { ...s, variant: v.name };
      out.write({ ...s, variant: v.name });
      exit ||= exitCodeFor(trials, s);
      console.log(`\n== ${v.name} (${v.bytes} bytes, ${v.medium}) ==\n${formatTable(s)}`);
      const pct = (x: number | null) => (x === null ? "n/a" : `${(x * 100).toFixed(0)}%`);
      if (s.metrics.pause_vs_raw_push?.n)
        console.log(
          `per trial, against the registry's raw speed just before: pause p50 ${pct(s.metrics.pause_vs_raw_push.p50)} of raw push, resume p50 ${pct(s.metrics.resume_vs_raw_pull.p50)} of raw pull and ${pct(s.metrics.resume_vs_raw_pull_extract?.p50 ?? null)} of a raw pull into tar -x`,
        );
    }
  } finally {
    out.close();
    await target.close();
    console.log(`results: ${out.path}`);
  }
  process.exitCode = exit;
}

async function delayed(f: Map<string, string>): Promise<void> {
  const args = delayedArgs(f);
  // the idle mode needs the automatic pause task, one of the Manager's maintenance tasks
  const target = await openTarget(
    targetArgs(f, {
      size: "bench",
      profile: "base",
      warm: intFlag(f, "warm", 0),
      memoryLimit: "1Gi",
      workspace: "2Gi",
      maintenance: true,
    }),
  );
  try {
    const server =
      target.kind === "server" ? { url: f.get("server")!, token: f.get("token") ?? process.env.SBX_TOKEN } : undefined;
    process.exitCode = await runDelayed(target, args, { output: f.get("output"), server });
  } finally {
    await target.close();
  }
}

async function trial(
  t: BenchTarget,
  v: Variant,
  index: number,
  settleMs: number,
): Promise<TrialRecord & Record<string, unknown>> {
  const m = t.manager;
  const timings: Record<string, number> = {};
  const rec: TrialRecord & Record<string, unknown> = {
    type: "trial",
    index,
    warmup: false,
    ok: false,
    timings,
    sandbox_id: null,
  };
  let stage = "create";
  try {
    const sb = await m.create({ owner: t.owner, profile: "base", size: "bench" });
    rec.sandbox_id = sb.id;
    await m.wait(t.owner, sb.id, { timeoutMs: 5 * 60_000 });
    stage = "load";
    let sha = "";
    await m.putArchive(
      t.owner,
      sb.id,
      v.dir,
      singleFileTar(
        "payload.bin",
        v.bytes,
        shakeStream(BENCH_SEED, v.bytes, (h) => (sha = h)),
      ),
    );
    rec.payload_sha256 = sha;
    const file = `${v.dir}/payload.bin`;
    const sync = await sh(
      m,
      t.owner,
      sb.id,
      "sync; (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && echo dropped || echo not-dropped; cat /proc/sys/kernel/random/boot_id",
    );
    const [dropped, bootBefore] = sync.stdout.trim().split("\n");
    rec.page_cache_dropped = dropped === "dropped";
    rec.boot_id_before = bootBefore;
    if (settleMs > 0) await new Promise((r) => setTimeout(r, settleMs));
    const baseline = t.registry && v.bytes >= RAW_MIN_BYTES ? t.registry : undefined;
    if (baseline) {
      stage = "raw push";
      rec.raw_before_pause = await rawThroughput(baseline, v.bytes, t.rawAuth);
      timings.raw_push_MBps = (rec.raw_before_pause as { push_MBps: number }).push_MBps;
    }
    stage = "pause";
    let t0 = performance.now();
    await m.pause(t.owner, sb.id);
    timings.pause_ms = performance.now() - t0;
    if (t.stepsSince) rec.pause_steps = t.stepsSince(sb.id, t0);
    if (t.snapshotOf) rec.snapshot = await t.snapshotOf(sb.id);
    if (t.beforeResume) rec.before_resume = await t.beforeResume();
    if (baseline) {
      stage = "raw pull";
      // plus a reference with the disk in it: the same blob pulled into tar -x on this machine
      const raw = await rawThroughput(baseline, v.bytes, t.rawAuth, { extract: true });
      rec.raw_before_resume = raw;
      timings.raw_pull_MBps = raw.pull_MBps;
      timings.raw_pull_extract_MBps = raw.pull_extract_MBps!;
    }
    stage = "resume";
    t0 = performance.now();
    await m.resume(t.owner, sb.id);
    timings.resume_ms = performance.now() - t0;
    if (t.computeOf) rec.restored_compute = await t.computeOf(sb.id);
    if (t.stepsSince) rec.resume_steps = t.stepsSince(sb.id, t0);
    stage = "read";
    t0 = performance.now();
    const read = await sh(m, t.owner, sb.id, readBackScript(file));
    timings.read_ms = performance.now() - t0;
    timings.resume_plus_read_ms = timings.resume_ms + timings.read_ms;
    const [gotSha, mode, size, bootAfter] = read.stdout.trim().split("\n");
    rec.read_mode = mode;
    rec.boot_id_after = bootAfter;
    if (gotSha !== sha || Number(size) !== v.bytes)
      throw new Error(`read-back mismatch: sha256 ${gotSha} size ${size}, expected ${sha} size ${v.bytes}`);
    timings.pause_MBps = v.bytes / 1e6 / (timings.pause_ms / 1000);
    timings.resume_MBps = v.bytes / 1e6 / (timings.resume_ms / 1000);
    if (baseline) {
      timings.pause_vs_raw_push = timings.pause_MBps / timings.raw_push_MBps;
      timings.resume_vs_raw_pull = timings.resume_MBps / timings.raw_pull_MBps;
      timings.resume_vs_raw_pull_extract = timings.resume_MBps / timings.raw_pull_extract_MBps;
    }
    stage = "destroy";
    await m.kill(t.owner, sb.id);
    const gone = await m.get(t.owner, sb.id).then(
      () => false,
      (e: unknown) => e instanceof NotFoundError || (e as { code?: string }).code === "not_found",
    );
    if (!gone) throw new Error("the sandbox is still listed after delete");
    rec.ok = true;
  } catch (err) {
    rec.failed_stage = stage;
    rec.error = (err as Error).message;
    if (rec.sandbox_id && stage !== "destroy")
      await m.kill(t.owner, rec.sandbox_id as string).catch((e: unknown) => (rec.cleanup_error = (e as Error).message));
  }
  return rec;
}

async function sh(m: BenchTarget["manager"], owner: string, id: string, script: string): Promise<{ stdout: string }> {
  return shText(m, owner, id, script);
}

main().catch((err: unknown) => {
  console.error(`pause-data benchmark: ${(err as Error).message}`);
  process.exit(2);
});
