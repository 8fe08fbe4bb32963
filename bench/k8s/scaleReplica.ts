// The manager process bench/k8s/scale.ts measures: the real service in the manager role
// (bench/k8s/replicaFleet.ts's replica entry) in a process of its own, run the way the product
// runs it. The Deployment runs an esbuild bundle with plain node (components/runtime/bundle.ts,
// render.ts), so by default the replica is that same bundling of the entry, helper embedded, with
// the Deployment's process environment; `tsx` runs the TypeScript sources under tsx instead (the
// checkout's way, to see what the transpiler itself costs). Memory is read from /proc.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildRuntimeCode, helperForBundle } from "../../components/runtime/bundle.ts";
import { type Replica, type ReplicaArgs, spawnReadyReplica } from "./replicaFleet.ts";

const ENTRY = resolve(import.meta.dirname, "replicaFleet.ts");

export type ReplicaRuntime = "bundle" | "tsx";

export interface ReplicaProcess extends Replica {
  /** VmRSS and VmHWM (the peak so far) from /proc/<pid>/status, MiB; undefined once gone */
  memory(): { rssMiB: number; hwmMiB: number } | undefined;
}

/** Builds the bundle once per run; `dispose` removes it. */
export function replicaLauncher(runtime: ReplicaRuntime) {
  const dir = mkdtempSync(join(tmpdir(), "sbx-scale-"));
  let file = ENTRY;
  if (runtime === "bundle") {
    file = join(dir, "replica.mjs");
    const helper = helperForBundle();
    if ("missing" in helper) throw new Error(`the in-sandbox helper could not be built: ${helper.missing}`);
    writeFileSync(file, buildRuntimeCode(ENTRY, helper));
  }
  const argv = (a: ReplicaArgs) => [
    // the replica runs in a temp dir (its heap snapshots land there), so tsx is named by its path
    ...(runtime === "tsx" ? ["--import", import.meta.resolve("tsx")] : []),
    // `kill -USR2 <pid>` writes a V8 heap snapshot into the replica's cwd, to see what it holds
    "--heapsnapshot-signal=SIGUSR2",
    file,
    "replica",
    JSON.stringify(a),
  ];
  return {
    start: (a: ReplicaArgs, env: Record<string, string>, timeoutMs = 180_000) =>
      startReplica(argv(a), a, env, dir, timeoutMs),
    /** moves the replicas' heap snapshots (written into their cwd) into `into` */
    keepSnapshots: (into: string) => {
      mkdirSync(into, { recursive: true });
      for (const f of readdirSync(dir)) if (f.endsWith(".heapsnapshot")) renameSync(join(dir, f), join(into, f));
    },
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}

async function startReplica(
  argv: string[],
  a: ReplicaArgs,
  env: Record<string, string>,
  cwd: string,
  timeoutMs: number,
): Promise<ReplicaProcess> {
  const r = await spawnReadyReplica(argv, a, { timeoutMs, cwd, env, stderrKeep: 100_000 });
  return { ...r, memory: () => procMemory(r.pid) };
}

function procMemory(pid: number): { rssMiB: number; hwmMiB: number } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB$`, "m").exec(s)?.[1] ?? Number.NaN);
    return { rssMiB: Math.round(kb("VmRSS") / 1024), hwmMiB: Math.round(kb("VmHWM") / 1024) };
  } catch {
    return undefined;
  }
}
