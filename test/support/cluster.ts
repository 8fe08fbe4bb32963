// Helpers for tests in the `k8s` vitest project, which run against the control plane that
// test/setup/control-plane.ts starts. See docs/control-plane.md for what the cluster offers.
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import {
  CoreV1Api,
  Exec,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
  type V1Status,
} from "@kubernetes/client-node";
import { inject } from "vitest";
import { SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "../../runtime/k8s/contract.ts";

/** Admin (system:masters) client config of the test cluster. */
export function loadKubeConfig(): KubeConfig {
  const path = inject("kubeconfigPath") ?? process.env.SBX_TEST_KUBECONFIG;
  if (!path) throw new Error("no test cluster: run this file in the vitest `k8s` project (npm run test:k8s)");
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

export function registryUrl(): string {
  return inject("registryUrl");
}

/** the registry in `auth: token` mode (tools/control-plane/plan.ts tokenRegistryConfig) */
export function tokenRegistry(): ReturnType<typeof inject<"tokenRegistry">> {
  return inject("tokenRegistry");
}

export interface TestNamespace {
  name: string;
  delete(): Promise<void>;
}

/**
 * Creates a namespace with a unique name and waits until its `default` service account
 * exists (pods are refused until then, as on a real cluster).
 */
export async function createNamespace(kc: KubeConfig, prefix = "t"): Promise<TestNamespace> {
  const core = kc.makeApiClient(CoreV1Api);
  const ns = await core.createNamespace({ body: { metadata: { generateName: `${prefix}-` } } });
  const name = ns.metadata!.name!;
  await waitFor(`service account ${name}/default`, async () => {
    await core.readNamespacedServiceAccount({ name: "default", namespace: name });
    return true;
  });
  return {
    name,
    delete: async () => {
      await core.deleteNamespace({ name }).catch(() => undefined);
    },
  };
}

export interface PodOptions {
  /** Select (and tolerate) the sandbox nodes (default), or select the untainted system node. */
  onSandboxNode?: boolean;
  command?: string[];
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  /** emptyDir volumes, by name -> mount path. /tmp and /workspace are private per pod anyway. */
  emptyDirs?: Record<string, string>;
}

/** A one-container pod ("main") that the simulated nodes will run. */
export function podManifest(name: string, o: PodOptions = {}): V1Pod {
  const sandbox = o.onSandboxNode ?? true;
  const volumes = Object.keys(o.emptyDirs ?? {}).map((v) => ({ name: v, emptyDir: {} }));
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, annotations: o.annotations, labels: o.labels },
    spec: {
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 0,
      tolerations: sandbox ? [{ ...SANDBOX_NODE_TAINT, operator: "Equal" }] : undefined,
      nodeSelector: { [SANDBOX_NODE_LABEL.key]: sandbox ? SANDBOX_NODE_LABEL.value : "system" },
      volumes,
      containers: [
        {
          name: "main",
          image: "sbx.local/test:latest",
          command: o.command ?? ["sleep", "infinity"],
          resources: o.resources,
          volumeMounts: Object.entries(o.emptyDirs ?? {}).map(([v, mountPath]) => ({ name: v, mountPath })),
        },
      ],
    },
  };
}

/** Creates the pod and waits until kwok reports it Running. */
export async function runPod(kc: KubeConfig, namespace: string, pod: V1Pod): Promise<V1Pod> {
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespacedPod({ namespace, body: pod });
  return waitForPod(kc, namespace, pod.metadata!.name!, (p) => p.status?.phase === "Running");
}

export async function waitForPod(
  kc: KubeConfig,
  namespace: string,
  name: string,
  done: (p: V1Pod) => boolean,
  timeoutMs = 30_000,
): Promise<V1Pod> {
  const core = kc.makeApiClient(CoreV1Api);
  let last: V1Pod | undefined;
  await waitFor(
    `pod ${namespace}/${name}`,
    async () => {
      last = await core.readNamespacedPod({ name, namespace });
      return done(last);
    },
    timeoutMs,
  );
  return last!;
}

export interface ExecResult {
  stdout: Buffer;
  stderr: string;
  exitCode: number;
  status: V1Status;
  /** The websocket subprotocol the API server agreed to, e.g. v5.channel.k8s.io. */
  protocol: string;
}

/** The exit code the API server reports in an exec's final status (0 on Success). */
export function exitCodeOf(status: V1Status): number {
  if (status.status === "Success") return 0;
  const cause = status.details?.causes?.find((c) => c.reason === "ExitCode");
  if (!cause?.message) throw new Error(`exec failed without an exit code: ${JSON.stringify(status)}`);
  return Number(cause.message);
}

/** Runs a command in a pod through the API server over websocket (v5.channel.k8s.io), like the runtime does. */
export async function execInPod(
  kc: KubeConfig,
  namespace: string,
  pod: string,
  command: string[],
  stdin?: Buffer | string,
  container = "main",
): Promise<ExecResult> {
  const out = new PassThrough();
  const err = new PassThrough();
  const outChunks: Buffer[] = [];
  const errChunks: Buffer[] = [];
  out.on("data", (c: Buffer) => outChunks.push(c));
  err.on("data", (c: Buffer) => errChunks.push(c));
  const input = stdin === undefined ? null : Readable.from([Buffer.from(stdin)]);
  let protocol = "";
  const status = await new Promise<V1Status>((resolve, reject) => {
    new Exec(kc)
      .exec(namespace, pod, container, command, out, err, input, false, resolve)
      .then((ws) => {
        protocol = ws.protocol;
        ws.on("close", () =>
          setTimeout(() => reject(new Error(`exec ${command.join(" ")}: closed without a status`)), 1_000),
        );
      })
      .catch(reject);
  });
  const stdout = Buffer.concat(outChunks);
  return { stdout, stderr: Buffer.concat(errChunks).toString(), exitCode: exitCodeOf(status), status, protocol };
}

export interface CommandResult {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/** Runs the kubectl built with the control plane (exec through it uses SPDY). */
export function kubectl(args: string[], stdin?: Buffer | string, kubeconfig?: string): Promise<CommandResult> {
  const bin = join(inject("controlPlaneBin"), "kubectl");
  const child = spawn(bin, [`--kubeconfig=${kubeconfig ?? inject("kubeconfigPath")}`, ...args]);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on("data", (c: Buffer) => out.push(c));
  child.stderr.on("data", (c: Buffer) => err.push(c));
  child.stdin.end(stdin ?? "");
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) =>
      resolve({ code: code ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }),
    );
  });
}

/**
 * A client config that authenticates as a service account (a TokenRequest token), for
 * tests that check what RBAC lets that identity do.
 */
export async function serviceAccountKubeConfig(
  kc: KubeConfig,
  namespace: string,
  serviceAccount: string,
): Promise<KubeConfig> {
  const core = kc.makeApiClient(CoreV1Api);
  const tr = await core.createNamespacedServiceAccountToken({
    name: serviceAccount,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const cluster = kc.getCurrentCluster()!;
  const sa = new KubeConfig();
  sa.loadFromOptions({
    clusters: [{ ...cluster }],
    users: [{ name: serviceAccount, token: tr.status!.token }],
    contexts: [{ name: "sa", cluster: cluster.name, user: serviceAccount, namespace }],
    currentContext: "sa",
  });
  return sa;
}

/** Writes a kubeconfig file for `kc` (e.g. to hand a service-account identity to kubectl). */
export function kubeconfigFile(kc: KubeConfig, path: string): string {
  writeFileSync(path, kc.exportConfig(), { mode: 0o600 });
  return path;
}

export interface TerminateOptions {
  reason?: string;
  exitCode?: number;
  container?: string;
  after?: string;
}

/**
 * Makes a running pod's container terminate with `reason` and `exitCode` (default
 * OOMKilled / 137) while the pod phase stays Running, via the annotation that the kwok stage
 * `pod-container-terminate` (tools/control-plane/kwok-stages.yaml) acts on. Resolves with the pod once
 * the container status shows it.
 */
export async function terminateContainer(
  kc: KubeConfig,
  namespace: string,
  pod: string,
  o: TerminateOptions = {},
): Promise<V1Pod> {
  const core = kc.makeApiClient(CoreV1Api);
  await core.patchNamespacedPod(
    { name: pod, namespace, body: { metadata: { annotations: terminateAnnotations(o) } } },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
  return waitForPod(kc, namespace, pod, (p) =>
    (p.status?.containerStatuses ?? []).some((c) => (!o.container || c.name === o.container) && c.state?.terminated),
  );
}

export function terminateAnnotations(o: TerminateOptions = {}): Record<string, string> {
  const a: Record<string, string> = {
    "test.sbx.dev/terminate-reason": o.reason ?? "OOMKilled",
    "test.sbx.dev/terminate-exit-code": String(o.exitCode ?? 137),
  };
  if (o.container) a["test.sbx.dev/terminate-container"] = o.container;
  if (o.after) a["test.sbx.dev/terminate-after"] = o.after;
  return a;
}

/**
 * Polls `probe`. The bound is a safety net for a hung step, never the assertion, so it is at least
 * 60 s: an API-server write or a pod start takes seconds at load 15 on the 2 shared cores.
 */
export async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  timeoutMs = Math.max(timeoutMs, 60_000);
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    try {
      if (await probe()) return;
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last ? ` (last error: ${last})` : ""}`);
}
