// Helpers of the deploy suite (deploy.test.ts): port-forwards to the deployed pods that are
// always stopped, the `sbx` CLI as a child process, what the cluster says about the deployed
// runtime (pods, Lease, Sandbox records), and the diagnosis a failure message carries: the
// runtime pods' status and their containers' logs, not just "timed out".
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { inject } from "vitest";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import { SNAPSHOT_RECORD_ANNOTATION } from "../../../runtime/k8s/snapshotRecords.ts";
import type { SnapshotRecord } from "../../../runtime/snapshot/record.ts";
import { REPO } from "../../../tools/deploy/paths.ts";

const forwards = new Set<ChildProcess>();

export interface Forward {
  url: string;
  stop(): Promise<void>;
}

/** `kubectl port-forward <target> :<port>` (target e.g. pod/x); resolves once it listens. */
export function portForward(namespace: string, target: string, port: number): Promise<Forward> {
  const child = spawn(join(inject("controlPlaneBin"), "kubectl"), [
    `--kubeconfig=${inject("kubeconfigPath")}`,
    "-n",
    namespace,
    "port-forward",
    target,
    `:${port}`,
  ]);
  forwards.add(child);
  const exited = new Promise<void>((done) => child.on("close", () => done()));
  void exited.then(() => forwards.delete(child));
  let out = "";
  child.stdout.on("error", () => undefined);
  child.stderr.on("error", () => undefined);
  child.stderr.on("data", (c: Buffer) => (out += c.toString()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await exited;
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`port-forward ${namespace}/${target} did not start in 60 s: ${out}`));
    }, 60_000);
    child.on("error", reject);
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ url: `http://127.0.0.1:${m[1]}`, stop });
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`port-forward ${namespace}/${target} exited: ${out}`));
    });
  });
}

/** Every port-forward still running (afterAll stops them; the suite asserts none is left). */
export function runningForwards(): number {
  return forwards.size;
}

export async function stopAllForwards(): Promise<void> {
  await Promise.all(
    [...forwards].map(
      (c) =>
        new Promise<void>((done) => {
          c.once("close", () => done());
          c.kill("SIGTERM");
        }),
    ),
  );
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `node bin/sbx.mjs <args>` against `server` with `token`; a hung call fails naming itself. */
export function sbx(server: string, token: string, args: string[], cwd: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [join(REPO, "bin/sbx.mjs"), ...args], {
      cwd,
      env: { ...process.env, SBX_SERVER: server, SBX_TOKEN: token, SBX_CONFIG: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const r: CliResult = { code: null, stdout: "", stderr: "" };
    p.stdout.on("error", () => undefined);
    p.stderr.on("error", () => undefined);
    p.stdout.on("data", (c) => (r.stdout += c));
    p.stderr.on("data", (c) => (r.stderr += c));
    p.on("error", reject);
    const guard = setTimeout(() => {
      p.kill("SIGKILL");
      reject(new Error(`sbx ${args.join(" ")} did not finish in 180 s; stderr ${JSON.stringify(r.stderr)}`));
    }, 180_000);
    p.on("close", (code) => {
      clearTimeout(guard);
      r.code = code;
      resolve(r);
    });
  });
}

export const isReady = (p: V1Pod) => !!p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");

/** Pods of one Deployment (by its app.kubernetes.io/name label), not being deleted. */
export async function livePods(kc: KubeConfig, namespace: string, app: string): Promise<V1Pod[]> {
  const list = await kc
    .makeApiClient(CoreV1Api)
    .listNamespacedPod({ namespace, labelSelector: `app.kubernetes.io/name=${app}` });
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** The Sandbox record as the API server stores it (spec.podName names a claimed warm pod). */
export async function sandboxRecord(
  kc: KubeConfig,
  namespace: string,
  id: string,
): Promise<{ spec?: Record<string, unknown>; status?: Record<string, unknown> }> {
  return (await kc.makeApiClient(CustomObjectsApi).getNamespacedCustomObject({
    group: API_GROUP,
    version: API_VERSION,
    namespace,
    plural: SANDBOX_PLURAL,
    name: id,
  })) as { spec?: Record<string, unknown>; status?: Record<string, unknown> };
}

/**
 * What the runtime pods are doing: each pod's phase, conditions and container states, then
 * the last lines of every container's log (init containers included, and the run before a
 * restart). Never throws: it is called while a failure is being reported.
 */
export async function diagnose(kc: KubeConfig, namespace: string): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  const out: string[] = [`--- pods in ${namespace}`];
  let pods: V1Pod[];
  try {
    pods = (await core.listNamespacedPod({ namespace })).items;
  } catch (err) {
    return `${out[0]}: cannot list (${err instanceof Error ? err.message : String(err)})`;
  }
  for (const p of pods) {
    const name = p.metadata?.name ?? "?";
    const conditions = (p.status?.conditions ?? []).map((c) => `${c.type}=${c.status}`).join(" ");
    out.push(`pod ${name} on ${p.spec?.nodeName ?? "-"}: ${p.status?.phase} ${conditions}`);
    const statuses = [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])];
    for (const s of statuses) {
      out.push(`  ${s.name}: ready=${s.ready} restarts=${s.restartCount} state=${JSON.stringify(s.state)}`);
      if (s.lastState?.terminated) out.push(`    last: ${JSON.stringify(s.lastState.terminated)}`);
    }
    const containers = [...(p.spec?.initContainers ?? []), ...(p.spec?.containers ?? [])].map((c) => c.name);
    for (const container of containers) {
      for (const previous of [true, false]) {
        try {
          const log = await core.readNamespacedPodLog({ name, namespace, container, tailLines: 30, previous });
          if (log.trim()) out.push(`  log ${container}${previous ? " (previous run)" : ""}:\n${indent(log)}`);
        } catch {
          // no such run (no previous one, or not started yet)
        }
      }
    }
  }
  return out.join("\n");
}

function indent(text: string): string {
  return text
    .trimEnd()
    .split("\n")
    .map((l) => `    ${l.slice(0, 400)}`)
    .join("\n");
}

/** The pause/resume record the runtime keeps on the Sandbox object (snapshotRecords.ts). */
export async function snapshotRecordOf(kc: KubeConfig, namespace: string, id: string): Promise<SnapshotRecord> {
  const obj = (await sandboxRecord(kc, namespace, id)) as { metadata?: { annotations?: Record<string, string> } };
  return JSON.parse(obj.metadata?.annotations?.[SNAPSHOT_RECORD_ANNOTATION] ?? "{}") as SnapshotRecord;
}

export { metricValue } from "../../support/metrics.ts";
