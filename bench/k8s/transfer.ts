// Where a Kubernetes pause/resume's bytes spend their time: one payload moved along each piece of
// the path separately, in one sandbox, in one run. Each row gives wall time, MB/s and the CPU
// seconds each process spent (this Node process; on the test control plane also kube-apiserver,
// sbx-kubelet with the bubblewrap/tar children it reaped, etcd, docker-registry), so a row that
// is CPU-bound shows who burned it. Prints numbers; asserts nothing.
//
//   npx tsx bench/k8s/transfer.ts [--mib 1024] [--platform kubernetes | --kubeconfig ... (as bench/pause-data.ts)]
//       [--rows put,stdin,dd,tar,stdout,get,kubectl-stdout,kubectl-stdin,raw,pause-resume]
//       [--paths default | channel,websocket,pod] [--rounds 1]
// --paths runs the rows that move bytes through an exec (put, stdin, stdout, get, pause-resume)
// once per path, on one sandbox, each through a backend replica of its own: "channel" carries
// commands and archives over the pod's command channel (commandChannel.transfers on), "websocket"
// is one websocket exec each (commandChannel off); "pod" is the channel with the pods pushing and
// pulling their own snapshot layers (snapshots.podRegistry); "default" is the target's own Manager. With
// --rounds N the paths alternate N times, so a load change on the shared machine hits both.
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { Readable, Writable } from "node:stream";
import { finished, pipeline } from "node:stream/promises";
import { SANDBOX_CONTAINER } from "../../runtime/k8s/contract.ts";
import type { KubernetesBackendOverrides } from "../../runtime/kubernetes.ts";
import { type KubernetesBenchTarget, openKubernetes } from "../lib/kubernetesTarget.ts";
import { rawThroughput } from "../lib/rawRegistry.ts";
import { BENCH_SEED, shakeBlock, shakeStream } from "../lib/shake.ts";
import { singleFileTar } from "../lib/tar.ts";
import { flags, intFlag, runnerEnvironment, targetArgs } from "../lib/target.ts";
import { table } from "./env.ts";

const ALL_ROWS = [
  "put",
  "stdin",
  "dd",
  "tar",
  "stdout",
  "get",
  "kubectl-stdout",
  "kubectl-stdin",
  "raw",
  "pause-resume",
];
const FILE = "/workspace/payload.bin";
const PATHS: Record<string, KubernetesBackendOverrides | undefined> = {
  default: undefined,
  channel: { commandChannel: { transfers: true } },
  websocket: { commandChannel: { enabled: false } },
  pod: { commandChannel: { transfers: true } },
};
/** paths whose pods move their own snapshot layers (pause and resume rows; the rest as channel) */
const POD_LAYERS = new Set(["pod"]);

interface Row {
  row: string;
  what: string;
  ms: number;
  MBps: number | null;
  cpu: Record<string, number>;
  /** CLOCK_MONOTONIC µs at start and end, the clock of a --cpu-prof profile's timestamps */
  monotonic_us: [number, number];
  /** the 1-minute load average at the row's end: the machine is shared */
  load: number;
  note?: string;
}

/**
 * The span from the step `from` to the last `to` (the snapshotter's durable steps): the layers
 * moving, without the pod's start (resume) or the manifest and records (both), as MB/s.
 */
function layerSpan(marks: { step: string; ms: number }[] | undefined, from: string, to: string, bytes: number): string {
  const start = marks?.find((m) => m.step === from)?.ms;
  const end = marks?.filter((m) => m.step === to).at(-1)?.ms;
  if (start === undefined || end === undefined || end <= start) return "";
  const ms = end - start;
  return `layers ${Math.round(ms)} ms, ${(bytes / 1e6 / (ms / 1000)).toFixed(1)} MB/s`;
}

async function main(): Promise<void> {
  const f = flags(process.argv.slice(2));
  const bytes = intFlag(f, "mib", 1024, 1) * 1048576;
  const rows = (f.get("rows") ?? ALL_ROWS.join(",")).split(",");
  for (const r of rows)
    if (!ALL_ROWS.includes(r)) throw new Error(`--rows: unknown row ${JSON.stringify(r)}: use ${ALL_ROWS.join(", ")}`);
  const paths = (f.get("paths") ?? "default").split(",");
  for (const p of paths)
    if (!(p in PATHS))
      throw new Error(`--paths: unknown path ${JSON.stringify(p)}: use default, or any of channel, websocket, pod`);
  const rounds = intFlag(f, "rounds", 1, 1);
  const t = await openKubernetes({
    ...targetArgs(f, { size: "bench", profile: "base", warm: 0, workspace: "10Gi", tmp: "1100Mi", memoryLimit: "3Gi" }),
    platform: "kubernetes",
  });
  const m = t.manager;
  const procs = clusterProcesses(t.kube.kubeconfigPath);
  const results: Row[] = [];
  const measure = async (
    row: string,
    what: string,
    moved: number | null,
    fn: () => Promise<string> | Promise<void>,
  ) => {
    const before = cpuNow(procs);
    const mono0 = Number(process.hrtime.bigint() / 1000n);
    const t0 = performance.now();
    const note = await fn();
    const ms = performance.now() - t0;
    const monotonic: [number, number] = [mono0, Number(process.hrtime.bigint() / 1000n)];
    const after = cpuNow(procs);
    const cpu = Object.fromEntries(
      Object.keys(after).map((k) => [k, Math.round((after[k] - (before[k] ?? 0)) * 100) / 100]),
    );
    const r: Row = {
      row,
      what,
      ms: Math.round(ms),
      MBps: moved ? Math.round((moved / 1e6 / (ms / 1000)) * 10) / 10 : null,
      cpu,
      monotonic_us: monotonic,
      load: Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]),
      ...(note ? { note } : {}),
    };
    results.push(r);
    process.stderr.write(`${JSON.stringify(r)}\n`);
  };
  try {
    const sb = await m.create({ owner: t.owner, profile: "base", size: "bench" });
    await m.wait(t.owner, sb.id, { timeoutMs: 300_000 });
    const id = sb.id;
    const sh = async (on: KubernetesBenchTarget["manager"], script: string, stdin?: Readable) => {
      const s = await on.exec(t.owner, id, { command: ["sh", "-c", script], timeoutMs: 15 * 60_000, stdin });
      let out = "";
      let err = "";
      s.stdout.on("data", (d: Buffer) => (out += d.toString()));
      s.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const [r] = await Promise.all([
        s.result,
        finished(s.stdout).catch(() => undefined),
        finished(s.stderr).catch(() => undefined),
      ]);
      if (r.exitCode !== 0) throw new Error(`${script} exited ${r.exitCode}: ${err.trim()}`);
      return (out + err).trim();
    };
    const managers = new Map<string, KubernetesBenchTarget["manager"]>();
    for (const p of paths) managers.set(p, PATHS[p] ? await t.replica(PATHS[p], { podLayers: POD_LAYERS.has(p) }) : m);
    const tag = (row: string, p: string) => (paths.length === 1 && p === "default" ? row : `${row}@${p}`);
    // the rows whose bytes cross an exec, once per path and round; the reading rows need the
    // file, and putting it is the "put" row
    const needsFile = rows.some((r) =>
      ["put", "dd", "tar", "stdout", "get", "kubectl-stdout", "pause-resume"].includes(r),
    );
    let filed = false; // without the put row, the file is put once
    const execRows = async (pm: KubernetesBenchTarget["manager"], p: string) => {
      if (rows.includes("put") || (needsFile && !filed))
        await measure(tag("put", p), "putArchive: Node -> apiserver -> sbx-kubelet -> tar -x (stdin)", bytes, () =>
          pm.putArchive(t.owner, id, "/workspace", singleFileTar("payload.bin", bytes, shakeStream(BENCH_SEED, bytes))),
        );
      filed = true;
      if (rows.includes("stdin"))
        await measure(
          tag("stdin", p),
          "exec stdin into `cat > /dev/null` (stdin, no disk, no tar)",
          bytes,
          async () => void (await sh(pm, "cat > /dev/null", repeated(bytes))),
        );
      if (rows.includes("stdout"))
        await measure(tag("stdout", p), "exec `cat file` to Node, discarded (stdout)", bytes, () =>
          drainExec(pm, t.owner, id, ["cat", FILE]),
        );
      if (rows.includes("get"))
        await measure(tag("get", p), "getArchive of the file to Node, discarded (stdout + tar)", bytes, async () =>
          drain(await pm.getArchive(t.owner, id, FILE)),
        );
    };
    for (let round = 0; round < rounds; round++) for (const p of paths) await execRows(managers.get(p)!, p);
    if (rows.includes("dd"))
      await measure("dd", "in the pod: dd of the file to /dev/null (disk read, no network)", bytes, () =>
        sh(m, `dd if=${FILE} of=/dev/null bs=4M 2>&1 | tail -1`),
      );
    if (rows.includes("tar"))
      await measure("tar", "in the pod: tar -c of the file | cat > /dev/null", bytes, () =>
        sh(m, `tar -c -f - -C /workspace payload.bin | cat > /dev/null`),
      );
    const kubectl = kubectlPath();
    const pod = await t.kube.podOf(id);
    const kargs = ["--kubeconfig", t.kube.kubeconfigPath, "-n", t.kube.namespace, "exec", pod, "-c", SANDBOX_CONTAINER];
    if (rows.includes("kubectl-stdout") && kubectl)
      await measure(
        "kubectl-stdout",
        "kubectl exec `cat file` > /dev/null (Go client, same apiserver path)",
        bytes,
        () => run(kubectl, [...kargs, "--", "cat", FILE]),
      );
    if (rows.includes("kubectl-stdin") && kubectl)
      await measure(
        "kubectl-stdin",
        "kubectl exec -i `cat > /dev/null` fed from Node (Go client, same path)",
        bytes,
        () => run(kubectl, [...kargs, "-i", "--", "sh", "-c", "cat > /dev/null"], repeated(bytes)),
      );
    const raw = () =>
      measure("raw", "registry: raw push then pull of one blob from Node (see note)", 2 * bytes, async () => {
        const r = await rawThroughput(t.registry!, bytes);
        return `push ${r.push_MBps.toFixed(1)} MB/s, pull ${r.pull_MBps.toFixed(1)} MB/s`;
      });
    const rawEachRound = rows.includes("raw") && !!t.registry && rows.includes("pause-resume");
    // with pause-resume, the raw baseline is taken again each round, right before that round's paths
    if (rows.includes("raw") && t.registry && !rawEachRound) await raw();
    if (rows.includes("pause-resume"))
      for (let round = 0; round < rounds; round++) {
        if (rawEachRound) await raw();
        for (const p of paths) {
          const pm = managers.get(p)!;
          await measure(
            tag("pause", p),
            "Manager.pause of the sandbox (the file plus an empty /tmp); note: the layers' own span",
            bytes,
            async () => {
              const t0 = performance.now();
              await pm.pause(t.owner, id);
              return layerSpan(t.stepsSince?.(id, t0), "pausing-recorded", "layer-pushed", bytes);
            },
          );
          await measure(
            tag("resume", p),
            "Manager.resume (cold pod: no warm pool); note: the layers' own span, after the pod is ready",
            bytes,
            async () => {
              const t0 = performance.now();
              await pm.resume(t.owner, id);
              return layerSpan(t.stepsSince?.(id, t0), "slot-acquired", "layer-restored", bytes);
            },
          );
        }
      }
    await m.kill(t.owner, id);
  } finally {
    await t.close();
  }
  const env = {
    ...runnerEnvironment(),
    ...t.environment,
    bytes,
    load_average_end: readFileSync("/proc/loadavg", "utf8").trim(),
  };
  console.log(JSON.stringify({ type: "environment", ...env }));
  for (const r of results) console.log(JSON.stringify({ type: "row", ...r }));
  const cpuCols = [...new Set(results.flatMap((r) => Object.keys(r.cpu)))];
  console.log(
    table(
      results.map((r) => ({
        row: r.row,
        ms: r.ms,
        "MB/s": r.MBps,
        load: r.load,
        ...Object.fromEntries(cpuCols.map((c) => [`cpu ${c} s`, r.cpu[c] ?? null])),
        note: r.note ?? "",
      })),
    ),
  );
}

/** `bytes` of the seeded stream's first block repeated: free to produce, so the row measures the path */
function repeated(bytes: number): Readable {
  const block = shakeBlock(BENCH_SEED, 0);
  let left = bytes;
  return new Readable({
    read() {
      if (left === 0) return void this.push(null);
      const n = Math.min(left, block.length);
      left -= n;
      this.push(n === block.length ? block : block.subarray(0, n));
    },
  });
}

async function drain(s: Readable): Promise<void> {
  await pipeline(s, new Writable({ write: (_c, _e, cb) => cb() }));
}

async function drainExec(
  m: KubernetesBenchTarget["manager"],
  owner: string,
  id: string,
  command: string[],
): Promise<void> {
  const s = await m.exec(owner, id, { command, timeoutMs: 15 * 60_000 });
  s.stderr.resume();
  const [r] = await Promise.all([s.result, drain(s.stdout)]);
  if (r.exitCode !== 0) throw new Error(`${command.join(" ")} exited ${r.exitCode}`);
}

function run(cmd: string, args: string[], stdin?: Readable): Promise<void> {
  return new Promise((res, rej) => {
    const c = spawn(cmd, args, { stdio: [stdin ? "pipe" : "ignore", "ignore", "pipe"] });
    let err = "";
    c.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    if (stdin) stdin.pipe(c.stdin!);
    c.on("error", rej);
    c.on("close", (code) =>
      code === 0 ? res() : rej(new Error(`${cmd} ${args.join(" ")} exited ${code}: ${err.trim()}`)),
    );
  });
}

function kubectlPath(): string | undefined {
  const repo = resolve(import.meta.dirname, "../..");
  const cache = join(repo, ".cache/control-plane");
  const built = existsSync(cache)
    ? readdirSync(cache)
        .map((v) => join(cache, v, "bin/kubectl"))
        .find((p) => existsSync(p))
    : undefined;
  return process.env.SBX_KUBECTL ?? built ?? ["/usr/local/bin/kubectl", "/usr/bin/kubectl"].find((p) => existsSync(p));
}

/**
 * The control plane's processes on this machine, found by the run directory in their command
 * line (the booted test cluster keeps its kubeconfig there); none for a remote cluster.
 */
function clusterProcesses(kubeconfigPath: string): Map<string, number[]> {
  const dir = dirname(kubeconfigPath);
  const out = new Map<string, number[]>();
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    if (!argv.some((a) => a.includes(dir))) continue;
    const name = argv[0].split("/").pop()!;
    if (
      ![
        "kube-apiserver",
        "sbx-kubelet",
        "etcd",
        "docker-registry",
        "kwok",
        "kube-controller-manager",
        "kube-scheduler",
      ].includes(name)
    )
      continue;
    out.set(name, [...(out.get(name) ?? []), Number(pid)]);
  }
  return out;
}

const TICKS = 100; // USER_HZ on Linux

/** CPU seconds so far: this process, and each named process including the children it reaped. */
function cpuNow(procs: Map<string, number[]>): Record<string, number> {
  const u = process.cpuUsage();
  const r: Record<string, number> = { node: (u.user + u.system) / 1e6 };
  for (const [name, pids] of procs) {
    let s = 0;
    for (const pid of pids) {
      try {
        const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
        // fields 14-17 (utime stime cutime cstime) are indexes 11-14 after the comm field
        s += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICKS;
      } catch {
        // gone
      }
    }
    r[name] = s;
  }
  return r;
}

main().catch((err: unknown) => {
  console.error(`transfer benchmark: ${(err as Error).message}`);
  process.exit(2);
});
