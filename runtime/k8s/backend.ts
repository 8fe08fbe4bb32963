// The Kubernetes Backend. A create writes the Sandbox record (one API write, durable: the id
// we return always has a record behind it) and returns; the pod is made by the leader's
// reconciler right after, from the record, so a crash between the two converges. Readiness,
// status and events come from two shared informers (watch.ts); exec, files and logs go through
// the API server's exec/log endpoints (commands.ts), so sandboxes need no server and no open
// port. This file only assembles the backend from its parts (parts.ts), the controller half it
// is given (control.ts; built in runtime/kubernetes.ts) and one module per job: accept.ts
// (creates), lookup.ts, commands.ts, pause.ts (compute release), activity.ts.
// Just over 400 lines on purpose: it is the one place that wires those parts together, and
// each job already lives in a module of its own.
import type { Readable } from "node:stream";
import { DiscoveryV1Api } from "@kubernetes/client-node";
import { inClusterRegistryOf } from "../config/schema.ts";
import { UpstreamError } from "../core/errors.ts";
import type {
  CommandAttachOptions,
  PoolStatus,
  Sandbox,
  SandboxEvent,
  SandboxSpec,
  WaitOptions,
} from "../core/types.ts";
import type { AutoPauseStatusStore } from "../autopause/controller.ts";
import type { SnapshotAwareBackend } from "../snapshot/wire.ts";
import { createAcceptor } from "./accept.ts";
import { type BudgetShares, createBudgetShares } from "./budget/wire.ts";
import { gateOnClaims } from "./claims/gate.ts";
import { ClaimPartition } from "./claims/partition.ts";
import { WriteBehindClaims } from "./claims/writeBehind.ts";
import { ActivityRecorder } from "./activity.ts";
import { SandboxAutoPauseStore } from "./autoPauseStatus.ts";
import type { ChannelSession } from "./channel/command.ts";
import type { ListedCommand } from "./channel/frames.ts";
import { createSandboxChannels, type SandboxChannels } from "./channel/sandboxChannels.ts";
import { WarmChannels } from "./channel/warmChannels.ts";
import { warmClaimer } from "./claims/warmClaim.ts";
import { isConflict, isNotFound, mergePatch, statusCode, toDomainError } from "./client.ts";
import { sandboxCommands } from "./commands.ts";
import { ANNOTATIONS, API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { ControlLoop, KubernetesControl, WarmPods } from "./control.ts";
import type { SupervisedInformer } from "./informer.ts";
import { sandboxLookup } from "./lookup.ts";
import type { KubernetesParts } from "./parts.ts";
import { createComputeRelease, discardClaimedPod } from "./pause.ts";
import { killableRunner } from "./podExec.ts";
import { sandboxPorts } from "./ports.ts";
import { POD_DELETE_GRACE_SECONDS } from "./podTemplate.ts";
import type { RecordWriter } from "./recordWriter.ts";
import { labelSafe, podNameOf, type SandboxResource, specFromResource } from "./resource.ts";
import { configuredPodLayers } from "./podLayers.ts";
import { RegistryEndpoint } from "./registryEndpoint.ts";
import { SandboxRecordStore } from "./snapshotRecords.ts";
import { startSandboxWatch } from "./watch.ts";

/** how often a replica writes the activity it saw to the records (one patch per busy sandbox) */
export const ACTIVITY_FLUSH_MS = 5_000;
export type { KubernetesBackendOverrides } from "./parts.ts";

export interface KubernetesBackend extends SnapshotAwareBackend {
  /** automatic pause/wake status in the Sandbox objects (shared by every replica) */
  readonly autoPauseStatus: AutoPauseStatusStore;
  /** true in the replica that holds the controller Lease: it alone runs cluster-wide automatic actions */
  leads(): boolean;
  /** the controller half, exposed for tests (leadership) */
  readonly controller: ControlLoop;
  readonly warmPool: WarmPods;
  /** warm claims decided in memory, their pod patches written behind (runtime/k8s/claims) */
  readonly warmClaims: WriteBehindClaims;
  /** the write-behind queue, exposed for benchmarks (durability lag) */
  readonly records: RecordWriter;
  /** this replica's share of a budget shared by several replicas (config.kubernetes.budgetShares) */
  readonly budgetShares?: BudgetShares;
  /**
   * Commands in a sandbox's registry (its pod's helper daemon), which outlive the replica that
   * started them: list them, and attach to one by id to read its output (replayed from the
   * start of what the daemon kept) and kill it. Undefined when the pod has no channel.
   */
  readonly commands: {
    list(id: string): Promise<ListedCommand[] | undefined>;
    attach(
      id: string,
      commandId: string,
      stdin?: Readable,
      o?: CommandAttachOptions,
    ): Promise<ChannelSession | undefined>;
  };
  /** this replica's command channels, exposed for tests */
  readonly channels: SandboxChannels;
  /**
   * Stops at once without draining anything, as a killed process would: accepts whose
   * records were not written yet are lost. For crash tests.
   */
  crash(): Promise<void>;
}

/** how long a wait on an unknown id looks for a record another replica just accepted */
const RECORD_VISIBILITY_GRACE_MS = 3_000;

export function assembleKubernetesBackend(p: KubernetesParts, control: KubernetesControl): KubernetesBackend {
  const { config, clock, logger, index, namespace: ns } = p;
  const { core, custom } = p.clients;
  const { controller, warmPool } = control;
  const crApi = { group: API_GROUP, version: API_VERSION, namespace: ns, plural: SANDBOX_PLURAL };
  const activity = new ActivityRecorder({
    clock,
    logger,
    intervalMs: p.overrides.activityFlushMs ?? ACTIVITY_FLUSH_MS,
    isNotFound,
    write: async (id, at) => {
      await custom.patchNamespacedCustomObject(
        { ...crApi, name: id, body: { metadata: { annotations: { [ANNOTATIONS.lastActivity]: at.toISOString() } } } },
        mergePatch,
      );
    },
  });
  const acceptor = createAcceptor(p, (id) => controller.enqueueSandbox(id));
  const recordWriter = acceptor.records;
  const lookup = sandboxLookup(p);
  // Warm claims are in-memory decisions over this replica's part of the pool: with budget shares
  // the pool is split between the shares document's live replicas (a change takes one phase, half
  // a lease); without them this is the only replica and every pod is its own.
  const partition = new ClaimPartition({
    self: p.identity,
    phaseMs: config.kubernetes.budgetShares.leaseSeconds * 500,
  });
  const shares = createBudgetShares(p, (live, atMs) => partition.observe(live, atMs));
  // performance.now: the ledger's own monotonic clock, which stamps the partition's observations
  const owns = (podName: string) => !shares || partition.owns(podName, performance.now());
  const claims = new WriteBehindClaims({
    reserve: (spec, owns) => warmPool.reserve(spec, owns),
    owns,
    pods: index,
    isLostRace: (err) => isConflict(err) || isNotFound(err) || statusCode(err) === 422,
    clock,
    logger: logger.child({ op: "warm-claim" }),
  });
  // the first command of a sandbox whose claim is still being written waits for it (claims/gate.ts)
  const gated = gateOnClaims(lookup, { claims, awaitReady: (id, ms) => index.awaitReady(id, ms) });
  const settled = async (id: string): Promise<void> => {
    await claims.landed(id);
    await recordWriter.settled(id);
  };
  // every record says whose share admitted it (runtime/k8s/budget)
  const admitted = (): Record<string, string> => ({ ...(shares?.annotations ?? {}) });
  let informers: SupervisedInformer<unknown>[] = [];
  // an in-cluster snapshot registry is reached at a ready pod of its Service (registryEndpoint.ts)
  const inCluster = config.snapshots?.inCluster ? inClusterRegistryOf(config.snapshots.registry) : undefined;
  const registryEndpoint =
    inCluster &&
    new RegistryEndpoint({
      discovery: p.clients.kc.makeApiClient(DiscoveryV1Api),
      service: inCluster,
      clock,
      logger: logger.child({ component: "snapshot-registry" }),
    });
  registryEndpoint?.start();
  let closed = false;

  const channels = createSandboxChannels({
    runInPod: p.runInPod,
    clock,
    logger,
    fallbackRunner: (id, pod) => killableRunner(p.runInPod, pod, { clock, logger: logger.child({ sandbox: id, pod }) }),
    options: p.overrides.commandChannel,
  });

  // warm pods get their channel before a claim (channel/warmChannels.ts); not in a controller-only process, which claims nothing
  const primeWarm = p.overrides.commandChannel?.enabled === false ? 0 : (p.overrides.commandChannel?.primeWarm ?? 64);
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

  const claimWarm = warmClaimer({
    claims,
    acceptor,
    channels,
    warmChannels,
    broker: p.broker,
    runInPod: p.runInPod,
    discardPod: (id, podName) => void discardClaimedPod({ core, namespace: ns, logger }, id, podName, "create"),
    admitted,
  });

  const withActivity = (sb: Sandbox): Sandbox => {
    const pending = activity.latest(sb.id);
    const mode = channels.mode(sb.id);
    const seen = mode ? { ...sb, commandChannel: mode } : sb;
    return pending && (!sb.lastActivityAt || sb.lastActivityAt < pending.toISOString())
      ? { ...seen, lastActivityAt: pending.toISOString() }
      : seen;
  };

  const derived = (id: string): Sandbox => {
    const sb = index.sandbox(id);
    if (!sb) throw new UpstreamError(`sandbox ${id} was written but is missing from the local index; this is a bug`);
    return withActivity(sb);
  };

  const pooled = (spec: SandboxSpec): boolean =>
    config.warmPool.some(
      (w) =>
        labelSafe(w.profile) === labelSafe(spec.image.profile) &&
        labelSafe(w.size) === labelSafe(spec.size.name) &&
        w.count > 0,
    );

  const open = (spec: SandboxSpec): void => {
    if (closed) throw new UpstreamError(`the Kubernetes backend is closed; sandbox ${spec.id} was not created`);
  };

  // pause/resume: the Sandbox object outlives its pod (runtime/k8s/pause.ts)
  const compute = createComputeRelease({
    namespace: ns,
    core,
    custom,
    index,
    warmPool,
    clock,
    logger,
    resource: (id) => lookup.resource(id),
    pooled,
    derived,
  });

  return {
    name: "kubernetes",
    controller,
    warmPool,
    warmClaims: claims,
    claimStats: () => ({
      ...claims.stats(),
      withChannel: warmChannels?.stats.moved ?? 0,
      primedChannels: warmChannels?.count() ?? 0,
    }),
    records: recordWriter,
    budgetShares: shares,
    snapshotRecords: new SandboxRecordStore({
      namespace: ns,
      custom,
      index,
      settled: (id) => settled(id),
    }),
    snapshotHolder: p.identity,
    ...(registryEndpoint ? { snapshotRegistryAddress: () => registryEndpoint.current() } : {}),
    ...configuredPodLayers(config.snapshots, {
      channels,
      lookup: gated,
      logger,
      clock,
      ...(registryEndpoint ? { inCluster: () => registryEndpoint.current() } : {}),
    }),
    autoPauseStatus: new SandboxAutoPauseStore({ namespace: ns, custom, index }),
    leads: () => controller.isLeader(),
    ...sandboxCommands(p, gated, channels),
    channels,
    commands: {
      list: async (id) => channels.list(id, (await gated.runningPod(id)).podName),
      attach: async (id, commandId, stdin, o) =>
        channels.attach(id, (await gated.runningPod(id)).podName, commandId, stdin, o),
    },
    ...sandboxPorts(p, gated, channels),

    async specOf(id) {
      const cr = index.resource(id);
      return cr ? specFromResource(cr) : undefined;
    },

    compute: {
      // the Sandbox resource outlives its pod, and adopt() patches only desiredState and podName
      keepsMetadata: true,
      async releaseCompute(id) {
        await settled(id);
        await compute.releaseCompute(id);
      },
      // the resumed sandbox's new pod is made by a reconcile; start it here, not only at the
      // watch event, so a manager-only process (which reconciles what it starts) makes it too
      adopt: async (spec) => {
        const sb = await compute.adopt(spec);
        controller.enqueueSandbox(spec.id);
        return sb;
      },
    },

    async start() {
      informers = await startSandboxWatch({
        clients: p.clients,
        namespace: ns,
        index,
        clock,
        logger,
        onSandboxGone: (id) => activity.forget(id),
      });
      controller.start();
      activity.start();
      await shares?.ledger.start(); // after the informers synced: orphans are counted from them
      warmChannels?.start(); // after the shares: which pods are this replica's to claim
    },

    async claim(spec) {
      open(spec);
      if (!pooled(spec)) return undefined;
      return (await claimWarm(spec)) ? derived(spec.id) : undefined;
    },

    async provision(spec) {
      open(spec);
      acceptor.accept(spec, undefined, admitted());
      return derived(spec.id);
    },

    async awaitReady(id, opts: WaitOptions) {
      await lookup.resource(id, RECORD_VISIBILITY_GRACE_MS);
      return withActivity(await index.awaitReady(id, opts.timeoutMs, opts.signal));
    },

    async delete(id) {
      await claims.landed(id); // a claim still being written: its record is queued once it settles
      if (recordWriter.cancel(id)) {
        index.deleteResource(id); // never written: nothing in the cluster to delete
        return;
      }
      await recordWriter.settled(id);
      const local = index.resource(id);
      if (local && !local.metadata.uid) index.deleteResource(id); // its write failed: only we knew it
      const cr = index.resource(id) ?? local;
      const podName = cr ? podNameOf(cr) : id;
      activity.forget(id);
      channels.pool.forget(id);
      const results = await Promise.allSettled([
        custom.deleteNamespacedCustomObject({ ...crApi, name: id, propagationPolicy: "Background" }),
        core.deleteNamespacedPod({ name: podName, namespace: ns, gracePeriodSeconds: POD_DELETE_GRACE_SECONDS }),
      ]);
      const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected" && !isNotFound(r.reason));
      if (failure) throw toDomainError(failure.reason, "delete sandbox", { kind: "sandbox", name: id });
    },

    async describe(id) {
      // From the index only: the informers are synced before start() returns and the
      // index holds this replica's own accepts, so this costs no API call on the create path.
      const sb = index.sandbox(id);
      return sb ? withActivity(sb) : undefined;
    },

    async list() {
      return index.sandboxes().map(withActivity);
    },

    async touch(id, at) {
      activity.record(id, at);
    },

    // A JSON merge patch of spec.metadata's keys alone, without a resourceVersion guard: each key
    // is written whole, so two replicas changing different keys both land, and a guard would turn
    // every unrelated write (activity annotation, status) into a conflict retry for nothing. Two
    // writes of the same key: the later one wins, which is what a moved end or a token means.
    async updateMetadata(id, patch) {
      await settled(id);
      try {
        const updated = await custom.patchNamespacedCustomObject(
          { ...crApi, name: id, body: { spec: { metadata: patch } } },
          mergePatch,
        );
        index.upsertResource(updated as SandboxResource);
      } catch (err) {
        throw toDomainError(err, "update sandbox metadata", { kind: "sandbox", name: id });
      }
      return derived(id);
    },

    subscribe(listener: (e: SandboxEvent) => void) {
      return index.subscribe(listener);
    },

    async poolStatus(): Promise<PoolStatus[]> {
      return warmPool.status();
    },

    async crash() {
      closed = true;
      await registryEndpoint?.stop();
      warmChannels?.close();
      channels.close();
      recordWriter.abandon();
      await shares?.ledger.stop();
      await controller.stop();
      await Promise.all(informers.map((i) => i.stop()));
    },

    async close() {
      closed = true;
      await registryEndpoint?.stop();
      warmChannels?.close();
      channels.close();
      await recordWriter.drain();
      await shares?.ledger.close();
      await controller.stop();
      await activity.close();
      await Promise.all(informers.map((i) => i.stop()));
    },
  };
}
