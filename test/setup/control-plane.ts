// Vitest global setup of the `k8s` project: builds (if needed) and starts, once per run and
// on free loopback ports, a real control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler), kwok with simulated nodes, sbx-kubelet (exec/logs into per-pod bubblewrap
// sandboxes) and an OCI registry. Tests get the admin kubeconfig and the registry through
// inject("kubeconfigPath") / inject("registryUrl") or SBX_TEST_KUBECONFIG / SBX_TEST_REGISTRY.
// Every process is stopped by PID in teardown, on SIGINT, and when the runner exits; the
// teardown fails the run if a container outlived its pod or a process outlived the stop
// (hygiene.ts).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";
import { bootCluster, type Cluster } from "../../tools/control-plane/boot.ts";
import { ProcessGroup } from "../../tools/control-plane/processes.ts";
import { hygieneReport, orphanedContainers } from "./hygiene.ts";
import { RUN_DIR_PREFIX, reapStaleRuns } from "./reap.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** Admin (system:masters) kubeconfig of the test cluster. */
    kubeconfigPath: string;
    /** Base URL of the OCI registry, e.g. http://127.0.0.1:41234. */
    registryUrl: string;
    /** host:port of the registry, for image references. */
    registryHost: string;
    /** a second registry in `auth: token` mode, with the key pair whose tokens it accepts */
    tokenRegistry: Cluster["tokenRegistry"];
    /** Directory holding one directory per pod (sbx-kubelet's --root). */
    podsDir: string;
    /** Folder of the control-plane binaries (kubectl is there). */
    controlPlaneBin: string;
  }
}

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

function controlPlaneBin(): string {
  const script = join(repo, "scripts/build-control-plane.sh");
  const built = spawnSync("bash", [script], { stdio: ["ignore", "inherit", "inherit"] });
  if (built.status !== 0) {
    throw new Error(
      `control plane: ${script} failed (exit ${built.status}); see its output above. ` +
        "Fix the build (docs/control-plane.md) or point SBX_CONTROL_PLANE_BIN at a folder of built binaries.",
    );
  }
  if (process.env.SBX_CONTROL_PLANE_BIN) return resolve(process.env.SBX_CONTROL_PLANE_BIN);
  const gomod = readFileSync(join(repo, "tools/control-plane/go.mod"), "utf8");
  const version = /\bk8s\.io\/kubernetes (v[0-9][^\s]*)/.exec(gomod)?.[1];
  if (!version)
    throw new Error("control plane: cannot find the k8s.io/kubernetes version in tools/control-plane/go.mod");
  return join(repo, ".cache/control-plane", version, "bin");
}

interface Run {
  dir: string;
  cluster: Cluster;
  teardown: () => Promise<void>;
}

/** One attempt: a fresh run dir, every process, and a teardown that undoes both. */
async function startRun(bin: string, keep: boolean): Promise<Run> {
  const dir = mkdtempSync(join(tmpdir(), RUN_DIR_PREFIX));
  for (const sub of ["logs", "pki", "etcd", "pods", "registry"]) mkdirSync(join(dir, sub));
  writeFileSync(join(dir, "owner.pid"), String(process.pid));
  const group = new ProcessGroup(join(dir, "logs"), join(dir, "pids"));

  let stopped = false;
  const cleanupNow = () => {
    group.killAllNow();
    if (!keep) rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = () => {
    cleanupNow();
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", cleanupNow);

  let booted: Cluster | undefined;
  const teardown = async () => {
    if (stopped) return;
    stopped = true;
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    process.off("exit", cleanupNow);
    // the check must not keep the stop from running: its own failure is reported after it
    const orphans = booted
      ? await orphanedContainers(booted.kubeconfigPath, join(dir, "pods")).catch((err: unknown) => err as Error)
      : [];
    await group.stopAll();
    if (keep) {
      rmSync(join(dir, "owner.pid"), { force: true }); // so a later run's reaper leaves it alone
      console.log(`control plane: kept ${dir} (SBX_TEST_KEEP_CONTROL_PLANE=1)`);
    } else rmSync(dir, { recursive: true, force: true });
    const report =
      orphans instanceof Error
        ? `control plane hygiene: could not list pods to look for orphaned containers: ${orphans.message}`
        : hygieneReport(dir, orphans, group.leftovers);
    if (report) {
      // vitest only logs an error thrown here; the exit code is what fails the run
      console.error(report);
      process.exitCode = 1;
      throw new Error(report);
    }
  };

  try {
    booted = await bootCluster({ bin, dir }, group);
    return { dir, cluster: booted, teardown };
  } catch (err) {
    if (existsSync(dir)) writeFileSync(join(dir, "logs", "setup-error.txt"), String(err));
    await teardown().catch((hygiene: unknown) => console.error(String(hygiene))); // the boot's error comes first
    throw err;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  const bin = controlPlaneBin();
  for (const stale of reapStaleRuns(tmpdir())) console.log(`control plane: cleaned up abandoned run ${stale}`);
  const keep = process.env.SBX_TEST_KEEP_CONTROL_PLANE === "1";

  // Free ports are picked before the components bind them, so a concurrent run on this
  // machine can take one in between; that (and only that) is retried on new ports.
  let run: Run | undefined;
  for (let attempt = 1; !run; attempt++) {
    try {
      run = await startRun(bin, keep);
    } catch (err) {
      if (attempt >= 3 || !/address already in use/.test(String(err))) throw err;
      console.log(`control plane: a port was taken meanwhile; retrying on new ports (attempt ${attempt + 1})`);
    }
  }
  const { dir, cluster } = run;
  project.provide("kubeconfigPath", cluster.kubeconfigPath);
  project.provide("registryUrl", cluster.registryUrl);
  project.provide("registryHost", cluster.registryHost);
  project.provide("tokenRegistry", cluster.tokenRegistry);
  project.provide("podsDir", join(dir, "pods"));
  project.provide("controlPlaneBin", bin);
  process.env.SBX_TEST_KUBECONFIG = cluster.kubeconfigPath;
  process.env.SBX_TEST_REGISTRY = cluster.registryUrl;
  console.log(
    `control plane: ready in ${((Date.now() - started) / 1000).toFixed(1)}s ` +
      `(apiserver ${cluster.server}, registry ${cluster.registryUrl}, logs ${join(dir, "logs")})`,
  );
  return run.teardown;
}
