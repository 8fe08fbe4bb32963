// The Kubernetes platform (runtime/platform.ts) from the backend's shared parts (parts.ts) and the
// controller half it is given (control.ts; built in runtime/kubernetes.ts): one small builder per
// part (activity, warm claims, command channels, the snapshot registry's address, pause support,
// the lifecycle), then the KubernetesBackend class over them. Test hooks ride on `testing`, never
// on the backend.
import { DiscoveryV1Api } from "@kubernetes/client-node";
import { inClusterRegistryOf } from "../config/schema.ts";
import type { Backend, ComputeRelease, SandboxSpec } from "../core/types.ts";
import type { PauseSupport, Platform, ReplicaSupport, SharedRecords } from "../platform.ts";
import { createAcceptor } from "./accept.ts";
import { ActivityRecorder } from "./activity.ts";
import { SandboxAutoPauseStore } from "./autoPauseStatus.ts";
import { KubernetesBackend } from "./backend.ts";
import { type BudgetShares, createBudgetShares } from "./budget/wire.ts";
import { createSandboxChannels, type SandboxChannels } from "./channel/sandboxChannels.ts";
import { WarmChannels } from "./channel/warmChannels.ts";
import { gateOnClaims } from "./claims/gate.ts";
import { ClaimPartition } from "./claims/partition.ts";
import { warmClaimer } from "./claims/warmClaim.ts";
import { WriteBehindClaims } from "./claims/writeBehind.ts";
import { isConflict, isNotFound, mergePatch, statusCode } from "./client.ts";
import { sandboxCommands } from "./commands.ts";
import { ANNOTATIONS, API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { ControlLoop, KubernetesControl, WarmPods } from "./control.ts";
import type { SupervisedInformer } from "./informer.ts";
import type { SandboxLookup } from "./lookup.ts";
import { sandboxLookup } from "./lookup.ts";
import type { KubernetesParts } from "./parts.ts";
import { createComputeRelease, discardClaimedPod } from "./pause.ts";
import { killableRunner } from "./podExec.ts";
import { configuredPodLayers } from "./podLayers.ts";
import { sandboxPorts } from "./ports.ts";
import { SandboxReads } from "./reads.ts";
import type { RecordWriter } from "./recordWriter.ts";
import { RegistryEndpoint } from "./registryEndpoint.ts";
import { labelSafe, specFromResource } from "./resource.ts";
import { podResourceReader } from "./resourceReader.ts";
import { SandboxRecordStore } from "./snapshotRecords.ts";
import { startSandboxWatch } from "./watch.ts";

/** how often a replica writes the activity it saw to the records (one patch per busy sandbox) */
export const ACTIVITY_FLUSH_MS = 5_000;

export interface KubernetesPlatform extends Platform {
  readonly backend: KubernetesBackend;
  readonly pause: PauseSupport & { readonly records: SharedRecords };
  readonly replicas: ReplicaSupport;
  /** what tests and benchmarks look at; production code never reads it */
  readonly testing: KubernetesTesting;
}

export interface KubernetesTesting {
  /** the controller half (leadership) */
  readonly controller: ControlLoop;
  readonly warmPool: WarmPods;
  /** warm claims decided in memory, their pod patches written behind (runtime/k8s/claims) */
  readonly warmClaims: WriteBehindClaims;
  /** the write-behind queue of records (durability lag) */
  readonly records: RecordWriter;
  /** this replica's command channels */
  readonly channels: SandboxChannels;
  /** this replica's share of a budget shared by several replicas (config.kubernetes.budgetShares) */
  readonly budgetShares?: BudgetShares;
  /**
   * Stops at once without draining anything, as a killed process would: accepts whose
   * records were not written yet are lost. For crash tests.
   */
  crash(): Promise<void>;
}

// A little over 60 lines on purpose: it only passes the parts, each built by a named function
// below, to the backend and the platform; splitting it would pass the same dozen values twice.
export function assembleKubernetesPlatform(p: KubernetesParts, control: KubernetesControl): KubernetesPlatform {
  const { controller, warmPool } = control;
  const activity = activityRecorder(p);
  const acceptor = createAcceptor(p, (id) => controller.enqueueSandbox(id));
  const lookup = sandboxLookup(p);
  const { shares, owns, claims } = warmClaimPath(p, warmPool);
  // the first command of a sandbox whose claim is still being written waits for it (claims/gate.ts)
  const gated = gateOnClaims(lookup, { claims, awaitReady: (id, ms) => p.index.awaitReady(id, ms) });
  const settled = async (id: string): Promise<void> => {
    await claims.landed(id);
    await acceptor.records.settled(id);
  };
  const admitted = (): Record<string, string> => ({ ...(shares?.annotations ?? {}) });
  const { channels, warmChannels } = commandChannels(p, warmPool, owns);
  const registryEndpoint = registryEndpointFor(p);
  const reads = new SandboxReads({ index: p.index, activity, channels });
  const pooled = pooledIn(p.config);
  const parts = { p, controller, warmPool, activity, channels, warmChannels, shares, registryEndpoint };
  const lifecycle = platformLifecycle({ ...parts, records: acceptor.records });
  const backend = new KubernetesBackend({
    namespace: p.namespace,
    clients: p.clients,
    index: p.index,
    reads,
    lookup,
    acceptor,
    claims,
    claimWarm: warmClaimer({
      claims,
      acceptor,
      channels,
      warmChannels,
      broker: p.broker,
      runInPod: p.runInPod,
      discardPod: discarder(p),
      admitted,
    }),
    pooled,
    admitted,
    settled,
    activity,
    channels,
    ...(warmChannels ? { primed: { moved: () => warmChannels.stats.moved, count: () => warmChannels.count() } } : {}),
    warmPool,
    run: sandboxCommands(p, gated, channels),
    ports: sandboxPorts(p, gated, channels),
    commands: commandRegistry(channels, gated),
    readResources: podResourceReader({ index: p.index, channels, logger: p.logger }),
    lifecycle,
  });
  return {
    backend,
    pause: pauseSupport({ p, controller, warmPool, lookup, gated, channels, reads, pooled, settled, registryEndpoint }),
    autoPauseStatus: new SandboxAutoPauseStore({ namespace: p.namespace, custom: p.clients.custom, index: p.index }),
    replicas: { budgetScope: shares?.scope, leads: () => controller.isLeader() },
    testing: {
      controller,
      warmPool,
      warmClaims: claims,
      records: acceptor.records,
      channels,
      budgetShares: shares,
      crash: lifecycle.crash,
    },
    close: () => backend.close(),
  };
}

/** Deletes a warm pod a create claimed but could not use (pause.ts discardClaimedPod; never rejects). */
function discarder(p: KubernetesParts): (id: string, podName: string) => void {
  const d = { core: p.clients.core, namespace: p.namespace, logger: p.logger };
  return (id, podName) => void discardClaimedPod(d, id, podName, "create");
}

/** Activity seen by this replica, flushed to the records as an annotation (activity.ts). */
function activityRecorder(p: KubernetesParts): ActivityRecorder {
  const { custom } = p.clients;
  return new ActivityRecorder({
    clock: p.clock,
    logger: p.logger,
    intervalMs: p.overrides.activityFlushMs ?? ACTIVITY_FLUSH_MS,
    isNotFound,
    write: async (id, at) => {
      await custom.patchNamespacedCustomObject(
        {
          group: API_GROUP,
          version: API_VERSION,
          namespace: p.namespace,
          plural: SANDBOX_PLURAL,
          name: id,
          body: { metadata: { annotations: { [ANNOTATIONS.lastActivity]: at.toISOString() } } },
        },
        mergePatch,
      );
    },
  });
}

/**
 * Warm claims are in-memory decisions over this replica's part of the pool: with budget shares
 * the pool is split between the shares document's live replicas (a change takes one phase, half
 * a lease); without them this is the only replica and every pod is its own.
 */
function warmClaimPath(p: KubernetesParts, warmPool: WarmPods) {
  const partition = new ClaimPartition({
    self: p.identity,
    phaseMs: p.config.kubernetes.budgetShares.leaseSeconds * 500,
  });
  const shares = createBudgetShares(p, (live, atMs) => partition.observe(live, atMs));
  // performance.now: the ledger's own monotonic clock, which stamps the partition's observations
  const owns = (podName: string) => !shares || partition.owns(podName, performance.now());
  const claims = new WriteBehindClaims({
    reserve: (spec, owns) => warmPool.reserve(spec, owns),
    owns,
    pods: { upsertPod: (pod) => p.index.own.upsertPod(pod), pod: (name) => p.index.pod(name) },
    isLostRace: (err) => isConflict(err) || isNotFound(err) || statusCode(err) === 422,
    clock: p.clock,
    logger: p.logger.child({ op: "warm-claim" }),
  });
  return { shares, owns, claims };
}

/**
 * This replica's command channels, and the warm pods' channels opened before a claim
 * (channel/warmChannels.ts); none of the latter in a controller-only process, which claims nothing.
 */
function commandChannels(p: KubernetesParts, warmPool: WarmPods, owns: (podName: string) => boolean) {
  const { clock, logger } = p;
  const options = p.overrides.commandChannel;
  const channels = createSandboxChannels({
    runInPod: p.runInPod,
    clock,
    logger,
    fallbackRunner: (id, pod) => killableRunner(p.runInPod, pod, { clock, logger: logger.child({ sandbox: id, pod }) }),
    options,
  });
  const primeWarm = options?.enabled === false ? 0 : (options?.primeWarm ?? 64);
  const warmChannels =
    primeWarm > 0 && p.role !== "controller"
      ? new WarmChannels({
          pool: channels.pool,
          claimable: () => warmPool.claimable(owns),
          clock,
          logger,
          max: primeWarm,
        })
      : undefined;
  return { channels, warmChannels };
}

/** An in-cluster snapshot registry is reached at a ready pod of its Service (registryEndpoint.ts). */
function registryEndpointFor(p: KubernetesParts): RegistryEndpoint | undefined {
  const inCluster = p.config.snapshots?.inCluster ? inClusterRegistryOf(p.config.snapshots.registry) : undefined;
  if (!inCluster) return undefined;
  return new RegistryEndpoint({
    discovery: p.clients.kc.makeApiClient(DiscoveryV1Api),
    service: inCluster,
    clock: p.clock,
    logger: p.logger.child({ component: "snapshot-registry" }),
  });
}

function pooledIn(config: KubernetesParts["config"]): (spec: SandboxSpec) => boolean {
  return (spec) =>
    config.warmPool.some(
      (w) =>
        labelSafe(w.profile) === labelSafe(spec.image.profile) &&
        labelSafe(w.size) === labelSafe(spec.size.name) &&
        w.count > 0,
    );
}

/**
 * Commands in a sandbox's registry (its pod's helper daemon), which outlive the replica that
 * started them: list them, and attach to one by id to read its output (replayed from the start
 * of what the daemon kept) and kill it. Undefined when the pod has no channel.
 */
function commandRegistry(channels: SandboxChannels, gated: SandboxLookup): NonNullable<Backend["commands"]> {
  return {
    list: async (id) => channels.list(id, (await gated.runningPod(id)).podName),
    attach: async (id, commandId, stdin, o) =>
      channels.attach(id, (await gated.runningPod(id)).podName, commandId, stdin, o),
  };
}

/** Pause/resume on Kubernetes: the Sandbox object outlives its pod (pause.ts) and keeps the records. */
function pauseSupport(d: {
  p: KubernetesParts;
  controller: ControlLoop;
  warmPool: WarmPods;
  lookup: SandboxLookup;
  gated: SandboxLookup;
  channels: SandboxChannels;
  reads: SandboxReads;
  pooled: (spec: SandboxSpec) => boolean;
  settled: (id: string) => Promise<void>;
  registryEndpoint?: RegistryEndpoint;
}): KubernetesPlatform["pause"] {
  const { p, registryEndpoint } = d;
  const registryAddress = registryEndpoint ? () => registryEndpoint.current() : undefined;
  return {
    compute: kubernetesCompute(d),
    specOf: async (id) => {
      const cr = p.index.resource(id);
      return cr ? specFromResource(cr) : undefined;
    },
    records: {
      store: new SandboxRecordStore({
        namespace: p.namespace,
        custom: p.clients.custom,
        index: p.index,
        settled: d.settled,
      }),
      holder: p.identity,
    },
    ...configuredPodLayers(p.config.snapshots, {
      channels: d.channels,
      lookup: d.gated,
      logger: p.logger,
      clock: p.clock,
      ...(registryAddress ? { inCluster: registryAddress } : {}),
    }),
    ...(registryAddress ? { registryAddress } : {}),
  };
}

/** The Sandbox object outlives its pod (pause.ts): compute release waits for this replica's writes first. */
function kubernetesCompute(d: Parameters<typeof pauseSupport>[0]): ComputeRelease {
  const { p } = d;
  const release = createComputeRelease({
    namespace: p.namespace,
    core: p.clients.core,
    custom: p.clients.custom,
    index: p.index,
    warmPool: d.warmPool,
    clock: p.clock,
    logger: p.logger,
    resource: (id) => d.lookup.resource(id),
    pooled: d.pooled,
    derived: (id) => d.reads.derived(id),
  });
  return {
    // the Sandbox resource outlives its pod, and adopt() patches only desiredState and podName
    keepsMetadata: true,
    async releaseCompute(id) {
      await d.settled(id);
      await release.releaseCompute(id);
    },
    // the resumed sandbox's new pod is made by a reconcile; start it here, not only at the
    // watch event, so a manager-only process (which reconciles what it starts) makes it too
    adopt: async (spec) => {
      const sb = await release.adopt(spec);
      d.controller.enqueueSandbox(spec.id);
      return sb;
    },
  };
}

/**
 * Start: the informers (synced before it resolves), the controller, the activity flush, the
 * budget share, the warm channels, in that order. Close drains; crash drops what is queued.
 */
function platformLifecycle(d: {
  p: KubernetesParts;
  controller: ControlLoop;
  activity: ActivityRecorder;
  channels: SandboxChannels;
  warmChannels?: WarmChannels;
  shares?: BudgetShares;
  registryEndpoint?: RegistryEndpoint;
  records: RecordWriter;
}) {
  const { p, controller, activity, channels, warmChannels, shares, registryEndpoint, records } = d;
  let informers: SupervisedInformer<unknown>[] = [];
  let closed = false;
  registryEndpoint?.start();
  const stopAll = async (drain: boolean): Promise<void> => {
    closed = true;
    await registryEndpoint?.stop();
    warmChannels?.close();
    channels.close();
    if (drain) await records.drain();
    else records.abandon();
    await (drain ? shares?.ledger.close() : shares?.ledger.stop());
    await controller.stop();
    if (drain) await activity.close();
    await Promise.all(informers.map((i) => i.stop()));
  };
  return {
    closed: () => closed,
    async start(): Promise<void> {
      informers = await startSandboxWatch({
        clients: p.clients,
        namespace: p.namespace,
        index: p.index,
        clock: p.clock,
        logger: p.logger,
        onSandboxGone: (id) => activity.forget(id),
      });
      controller.start();
      activity.start();
      await shares?.ledger.start(); // after the informers synced: orphans are counted from them
      warmChannels?.start(); // after the shares: which pods are this replica's to claim
    },
    close: () => stopAll(true),
    crash: () => stopAll(false),
  };
}
