// The Kubernetes target of the pause/resume benchmarks: an in-process Manager on the Kubernetes
// backend, snapshots into an OCI registry. Two clusters, one code path:
//   test control plane  booted by tools/control-plane/standalone.ts (or SBX_TEST_KUBECONFIG); a fresh namespace
//                       pair; the registry the boot started, else our own docker-registry
//   real cluster        --kubeconfig --namespace --registry --image; nothing of the test cluster
//                       is used (no CRD install, no namespaces made, no simulated nodes). The
//                       namespace must not be managed by a running sbx service: this process
//                       runs its own controller there.
// "Compute is gone" = the API server lists no pod labelled with the sandbox id, and the
// Sandbox reports Paused.
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { VersionApi } from "@kubernetes/client-node";
import { buildManager } from "../../runtime/backends.ts";
import { validateRuntimeConfig } from "../../runtime/config/schema.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { loadKubeClients } from "../../runtime/k8s/client.ts";
import { API_GROUP, API_VERSION, LABELS, SANDBOX_NODE_LABEL, SANDBOX_PLURAL } from "../../runtime/k8s/contract.ts";
import type { SandboxResource } from "../../runtime/k8s/resource.ts";
import { createKubernetesPlatform, type KubernetesBackendOverrides } from "../../runtime/kubernetes.ts";
import { startLocalRegistry } from "../../runtime/local/registry.ts";
import { registryLoginFor } from "../../runtime/snapshot/registryLogin.ts";
import { issuerAuth, loadTokenIssuer } from "../../runtime/snapshot/registryToken.ts";
import { createPauseResume } from "../../runtime/snapshot/wire.ts";
import { freshNamespaces, installSandboxCrd } from "../../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../../tools/control-plane/standalone.ts";
import type { BenchTarget, TargetArgs } from "./benchTarget.ts";
import { RAW_REPOSITORY } from "./rawRegistry.ts";

/** what the test cluster's pods run (sbx-kubelet ignores the image and runs the host's tools) */
const TEST_CLUSTER_IMAGE = "registry.local/sbx/base:1";
const LEADER_TIMEOUT_MS = 60_000;

export interface KubernetesBenchTarget extends BenchTarget {
  /** for diagnostics (bench/k8s/transfer.ts): where the sandboxes are and how to reach them */
  kube: { kubeconfigPath: string; namespace: string; podOf(id: string): Promise<string> };
  /**
   * Another Manager on the same namespaces and config, with its own backend built with
   * `overrides` (e.g. commandChannel off, for a baseline path in the same run); closed with the target.
   */
  replica(overrides: KubernetesBackendOverrides, o?: { podLayers?: boolean }): Promise<BenchTarget["manager"]>;
}

export async function openKubernetes(a: TargetArgs): Promise<KubernetesBenchTarget> {
  const real = a.kubeconfig !== undefined;
  if (real) {
    for (const [flag, v] of [
      ["namespace", a.namespace],
      ["registry", a.registry],
      ["image", a.image],
    ] as const) {
      if (!v)
        throw new Error(
          `--kubeconfig ${a.kubeconfig}: --${flag} is required for a real cluster (namespace: one no sbx service manages; registry: an OCI registry this machine can push to; image: a sandbox image with sh, cat, tar, dd and sha256sum)`,
        );
    }
  }
  const cleanups: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const c of cleanups.reverse())
      await c().catch((err: unknown) => process.stderr.write(`bench cleanup: ${(err as Error).message}\n`));
  };
  try {
    const cp:
      | Awaited<ReturnType<typeof kubeconfig>>
      | { path: string; registry?: undefined; tokenRegistry?: undefined } = real
      ? { path: a.kubeconfig!, registry: undefined }
      : await kubeconfig();
    if (!real) cleanups.push(() => (cp as Awaited<ReturnType<typeof kubeconfig>>).stop());
    const clients = loadKubeClients(cp.path);
    let namespaces = { sandboxes: a.namespace ?? "", runtime: a.runtimeNamespace ?? a.namespace ?? "" };
    if (!real) {
      await installSandboxCrd(clients.kc);
      const ns = await freshNamespaces(clients.core, "bpr");
      cleanups.push(() => ns.cleanup());
      namespaces = { sandboxes: ns.sandboxes, runtime: ns.runtime };
    }
    const tokens = a.registryTokens ? cp.tokenRegistry : undefined;
    if (a.registryTokens && !tokens)
      throw new Error(
        "--registry-tokens needs the test control plane booted by this bench (unset SBX_TEST_KUBECONFIG)",
      );
    let registry = tokens?.url ?? a.registry ?? cp.registry;
    let registryNote = a.registry
      ? `given: ${a.registry}`
      : `docker-registry started by the control-plane boot (tools/control-plane/boot.ts), loopback, filesystem storage`;
    if (!registry) {
      const r = await startLocalRegistry({ purpose: "bench registry" });
      cleanups.push(() => r.stop());
      registry = r.url;
      registryNote = `docker-registry started by the bench (runtime/local/registry.ts), loopback, filesystem storage`;
    }
    const runId = randomBytes(3).toString("hex");
    const config = validateRuntimeConfig({
      platform: "kubernetes",
      catalog: { [a.profile]: a.image ?? TEST_CLUSTER_IMAGE },
      sizeClasses: {
        [a.size]: {
          cpuRequest: "250m",
          cpuLimit: "2",
          memoryRequest: "256Mi",
          memoryLimit: a.memoryLimit ?? "3Gi",
          workspace: a.workspace ?? "6Gi",
          tmp: a.tmp ?? "1536Mi",
          pids: 256,
        },
      },
      budget: { cpu: "64", memory: "256Gi" },
      defaults: { size: a.size, profile: a.profile },
      warmPool: a.warm > 0 ? [{ profile: a.profile, size: a.size, count: a.warm }] : [],
      snapshots: {
        registry,
        repository: `sbx-bench-${runId}`,
        // --pod-layers: the pods move their own layers; on the test cluster they reach the registry as we do
        ...(a.podLayers ? { podRegistry: registry } : {}),
        // --registry-tokens: the boot's token registry; the replica and each pod get their own tokens
        ...(tokens
          ? {
              tokenAuth: {
                keyFile: tokens.keyFile,
                certFile: tokens.certFile,
                issuer: tokens.issuer,
                service: tokens.service,
              },
            }
          : {}),
      },
      // its own lease, so two bench runs in one namespace never both reconcile it
      kubernetes: {
        namespace: namespaces.sandboxes,
        runtimeNamespace: namespaces.runtime,
        leaseName: "sbx-bench",
        kubeconfigPath: cp.path,
        runtimeClassName: a.runtimeClass,
      },
    });
    const logger = silentLogger();
    // the production construction: the backend loads the kubeconfig from config itself
    const platform = createKubernetesPlatform(
      config,
      { logger, clock: systemClock },
      { identity: `sbx-bench-${runId}` },
    );
    const { backend } = platform;
    // built here (as buildManager would) only to observe the snapshotter's durable steps
    const steps = new Map<string, { step: string; at: number }[]>();
    const onStep = (id: string, step: string) =>
      void steps.set(id, [...(steps.get(id) ?? []), { step, at: performance.now() }]);
    // the registry login buildManager would pick (tokens the runtime signs, with --registry-tokens)
    const auth = config.snapshots ? registryLoginFor(config.snapshots, { clock: systemClock }) : undefined;
    const pauseResume = createPauseResume(platform, { config, clock: systemClock, logger, onStep, auth });
    const { manager } = await buildManager(config, {
      logger,
      clock: systemClock,
      platform,
      pauseResume,
      reaperIntervalMs: 3_600_000,
    });
    await manager.start({ reaper: false, maintenance: a.maintenance ?? false });
    cleanups.push(() => manager.close());
    await until(
      `leadership of lease ${namespaces.runtime}/sbx-bench (another bench run or runtime may hold it)`,
      LEADER_TIMEOUT_MS,
      async () => platform.testing.controller.isLeader(),
    );

    const crOf = async (id: string) =>
      (await clients.custom.getNamespacedCustomObject({
        group: API_GROUP,
        version: API_VERSION,
        namespace: namespaces.sandboxes,
        plural: SANDBOX_PLURAL,
        name: id,
      })) as SandboxResource;
    const podsOf = async (id: string) =>
      (
        await clients.core.listNamespacedPod({
          namespace: namespaces.sandboxes,
          labelSelector: `${LABELS.sandbox}=${id}`,
        })
      ).items;
    const warmReady = async () =>
      (await backend.poolStatus!()).find((p) => p.profile === a.profile && p.size === a.size)?.ready ?? 0;
    const awaitWarm = async (): Promise<Record<string, unknown>> => {
      if (a.warm === 0) return { warm_ready: 0 };
      const t0 = Date.now();
      await until(`${a.warm} ready warm pods`, 300_000, async () => (await warmReady()) >= a.warm);
      return { warm_ready: await warmReady(), warm_wait_ms: Date.now() - t0 };
    };
    await awaitWarm();

    const environment = {
      target: real ? "kubernetes (real cluster)" : "kubernetes (test control plane)",
      kubeconfig: real
        ? a.kubeconfig
        : process.env.SBX_TEST_KUBECONFIG
          ? `SBX_TEST_KUBECONFIG=${cp.path}`
          : "booted by tools/control-plane/standalone.ts",
      context: clients.kc.getCurrentContext(),
      server: clients.kc.getCurrentCluster()?.server,
      ...(await clusterFacts(clients)),
      namespace: namespaces.sandboxes,
      runtime_namespace: namespaces.runtime,
      image: config.catalog[a.profile],
      runtime_class: a.runtimeClass ?? "cluster default",
      registry: registryNote,
      registry_url: registry,
      snapshot_repository: config.snapshots!.repository,
      size_class: config.sizeClasses[a.size],
      warm_pool: config.warmPool,
      compute_gone: `no pod labelled ${LABELS.sandbox}=<id> in the API server and the Sandbox reports Paused`,
    };
    return {
      kind: "kubernetes",
      manager: manager as unknown as BenchTarget["manager"],
      owner: a.owner,
      registry,
      ...(tokens && config.snapshots?.tokenAuth
        ? { rawAuth: issuerAuth(loadTokenIssuer(config.snapshots.tokenAuth, systemClock), RAW_REPOSITORY) }
        : {}),
      computeGone: async (id) => (await podsOf(id)).length === 0 && (await manager.get(a.owner, id)).phase === "Paused",
      snapshotOf: async (id) => (await crOf(id)).status?.snapshot,
      computeOf: async (id) => {
        const cr = await crOf(id);
        // a cold pod is named after its sandbox; a warm one keeps its pool name
        const pod = cr.spec.podName ?? cr.metadata.name;
        return { pod, warm: pod !== id, node: cr.status?.node ?? null };
      },
      kube: {
        kubeconfigPath: cp.path,
        namespace: namespaces.sandboxes,
        podOf: async (id) => (await crOf(id)).spec.podName ?? id,
      },
      replica: async (overrides, o = {}) => {
        // podLayers: the pods push and pull their snapshot layers themselves (runtime/k8s/podLayers.ts);
        // on the test cluster they reach the registry at the same loopback address as this process
        const cfg =
          o.podLayers && config.snapshots
            ? { ...config, snapshots: { ...config.snapshots, podRegistry: config.snapshots.registry } }
            : config;
        const b = createKubernetesPlatform(
          cfg,
          { logger, clock: systemClock },
          { ...overrides, identity: `sbx-bench-${runId}-${cleanups.length}` },
        );
        const pr = createPauseResume(b, { config: cfg, clock: systemClock, logger, onStep, auth });
        const built = await buildManager(cfg, {
          logger,
          clock: systemClock,
          platform: b,
          pauseResume: pr,
          reaperIntervalMs: 3_600_000,
        });
        await built.manager.start({ reaper: false });
        cleanups.push(() => built.manager.close());
        return built.manager as unknown as BenchTarget["manager"];
      },
      beforeResume: awaitWarm,
      stepsSince: (id, t0) => {
        const marks = (steps.get(id) ?? [])
          .filter((m) => m.at >= t0)
          .map((m) => ({ step: m.step, ms: Math.round((m.at - t0) * 10) / 10 }));
        steps.delete(id);
        return marks;
      },
      environment,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

async function clusterFacts(clients: ReturnType<typeof loadKubeClients>): Promise<Record<string, unknown>> {
  const facts: Record<string, unknown> = {};
  try {
    facts.control_plane_version = (await clients.kc.makeApiClient(VersionApi).getCode()).gitVersion;
  } catch (err) {
    facts.control_plane_version = `unknown: ${(err as Error).message}`;
  }
  try {
    const nodes = (await clients.core.listNode({ labelSelector: SANDBOX_NODE_LABEL.key })).items;
    facts.sandbox_nodes = nodes.map((n) => ({
      name: n.metadata?.name,
      kubelet: n.status?.nodeInfo?.kubeletVersion,
      runtime: n.status?.nodeInfo?.containerRuntimeVersion,
      cpu: n.status?.capacity?.cpu,
      memory: n.status?.capacity?.memory,
    }));
  } catch (err) {
    facts.sandbox_nodes = `unknown (listing nodes: ${(err as Error).message})`;
  }
  return facts;
}

async function until(what: string, timeoutMs: number, ok: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
