// The Kubernetes Backend. A create writes the Sandbox record (one API write, durable: the id
// we return always has a record behind it) and returns; the pod is made by the leader's
// reconciler right after, from the record, so a crash between the two converges. Readiness,
// status and events come from two shared informers; exec, files and logs go through the API
// server's exec/log endpoints, so sandboxes need no server and no open port.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { PassThrough, Readable } from "node:stream";
import { Log, type KubernetesObject, type V1Pod } from "@kubernetes/client-node";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import { ConflictError, NotFoundError, SandboxFailedError, UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Backend, ExecRequest, ExecSession, LogOptions, PoolStatus, Sandbox, SandboxEvent, SandboxSpec, WaitOptions } from "../core/types.ts";
import { Controller } from "../controller/controller.ts";
import { SandboxReconciler } from "../controller/sandboxReconciler.ts";
import { WarmPool } from "../controller/warmpool.ts";
import { ActivityRecorder } from "./activity.ts";
import { getArchive, putArchive, type RunInSandbox } from "./archive.ts";
import { isNotFound, loadKubeClients, mergePatch, statusCode, toDomainError, type KubeClients } from "./client.ts";
import { POD_DELETE_GRACE_SECONDS } from "./podTemplate.ts";
import { RecordWriter } from "./recordWriter.ts";
import { ANNOTATIONS, API_GROUP, API_VERSION, LABELS, SANDBOX_CONTAINER, SANDBOX_PLURAL } from "./contract.ts";
import { createStsCredentialBroker, credentialsEnv, renderCredentialsFile, WRITE_CREDENTIALS_ARGV, type CredentialBroker } from "./credentials.ts";
import { createExecApi, startExec } from "./exec.ts";
import { buildExecArgv, EXEC_ID_VAR } from "./execCommand.ts";
import { newExecId, withProcessKill } from "./execKill.ts";
import { startSupervisedInformer, type SupervisedInformer } from "./informer.ts";
import { buildSandboxResource, labelSafe, podNameOf, specFromResource, type SandboxResource } from "./resource.ts";
import { SandboxIndex } from "./sandboxIndex.ts";
import { createComputeRelease } from "./pause.ts";
import { SandboxRecordStore } from "./snapshotRecords.ts";
import { SandboxAutoPauseStore } from "./autoPauseStatus.ts";
import type { AutoPauseStatusStore } from "../autopause/controller.ts";
import type { SnapshotAwareBackend } from "../snapshot/wire.ts";

/** Optional wiring for tests and benchmarks; production passes none of it. */
export interface KubernetesBackendOverrides {
  clients?: KubeClients;
  broker?: CredentialBroker;
  /** leader-election identity; defaults to a random one per process */
  identity?: string;
  leaseDurationMs?: number;
  retryPeriodMs?: number;
  activityFlushMs?: number;
  orphanGraceMs?: number;
}

export interface KubernetesBackend extends SnapshotAwareBackend {
  /** automatic pause/wake status in the Sandbox objects (shared by every replica) */
  readonly autoPauseStatus: AutoPauseStatusStore;
  /** true in the replica that holds the controller Lease: it alone runs cluster-wide automatic actions */
  leads(): boolean;
  /** the controller half, exposed for tests (leadership, idle) */
  readonly controller: Controller;
  readonly warmPool: WarmPool;
  /** the write-behind queue, exposed for benchmarks (durability lag) */
  readonly records: RecordWriter;
  /**
   * Stops at once without draining anything, as a killed process would: accepts whose
   * records were not written yet are lost. For crash tests.
   */
  crash(): Promise<void>;
}

export function createKubernetesBackend(config: RuntimeConfig, deps: { logger: Logger; clock: Clock }, overrides: KubernetesBackendOverrides = {}): KubernetesBackend {
  const { clock } = deps;
  const logger = deps.logger.child({ backend: "kubernetes" });
  const clients = overrides.clients ?? loadKubeClients(config.kubernetes.kubeconfigPath);
  const { kc, core, custom } = clients;
  const ns = config.kubernetes.namespace;
  const broker = overrides.broker ?? (config.credentials ? createStsCredentialBroker(config.credentials) : undefined);
  const index = new SandboxIndex({ credentialsRequired: !!broker, clock, logger });
  // unmasked client frames: masking every stdin byte in JavaScript was most of a resume's CPU (runtime/k8s/exec.ts)
  const execApi = createExecApi(kc);
  const crApi = { group: API_GROUP, version: API_VERSION, namespace: ns, plural: SANDBOX_PLURAL };
  const resolveImage = (profile: string) => readCatalog(config)[profile];

  const runInPod = (podName: string, argv: string[], stdin?: Uint8Array | Readable, timeoutMs?: number) =>
    startExec(execApi, { namespace: ns, pod: podName, container: SANDBOX_CONTAINER }, argv, { stdin, timeoutMs, clock });

  const deliverCredentials = broker
    ? async (id: string, podName: string): Promise<Date> => {
        const creds = await broker.mintScoped(id);
        const session = await runInPod(podName, WRITE_CREDENTIALS_ARGV, Buffer.from(renderCredentialsFile(creds)));
        session.stdout.resume();
        let err = "";
        session.stderr.on("data", (c: Buffer) => (err += c.toString()));
        const res = await session.result;
        if (res.exitCode !== 0) throw new UpstreamError(`writing credentials into sandbox ${id} (pod ${podName}) exited ${res.exitCode}: ${err.trim()}`);
        return creds.expiration;
      }
    : undefined;

  const warmPool = new WarmPool({ index, core, config, clock, logger, resolveImage });
  const identity = overrides.identity ?? `sbx-${randomUUID().slice(0, 8)}`;
  const reconciler = new SandboxReconciler({ index, core, custom, config, clock, logger, deliverCredentials, orphanGraceMs: overrides.orphanGraceMs });
  const controller = new Controller({
    index,
    reconciler,
    warmPool,
    coordination: clients.coordination,
    leaseNamespace: config.kubernetes.runtimeNamespace,
    leaseName: config.kubernetes.leaseName,
    identity,
    clock,
    logger,
    leaseDurationMs: overrides.leaseDurationMs,
    retryPeriodMs: overrides.retryPeriodMs,
  });
  const activity = new ActivityRecorder({
    clock,
    logger,
    intervalMs: overrides.activityFlushMs ?? 5_000,
    isNotFound,
    write: async (id, at) => {
      await custom.patchNamespacedCustomObject({ ...crApi, name: id, body: { metadata: { annotations: { [ANNOTATIONS.lastActivity]: at.toISOString() } } } }, mergePatch);
    },
  });
  let informers: SupervisedInformer<unknown>[] = [];
  let closed = false;

  const withActivity = (sb: Sandbox): Sandbox => {
    const pending = activity.latest(sb.id);
    return pending && (!sb.lastActivityAt || sb.lastActivityAt < pending.toISOString()) ? { ...sb, lastActivityAt: pending.toISOString() } : sb;
  };

  /** the record, from the cache or (another replica created it a moment ago) the API server */
  const resource = async (id: string, graceMs = 0): Promise<SandboxResource> => {
    const cached = index.resource(id);
    if (cached) return cached;
    try {
      const cr = (await custom.getNamespacedCustomObject({ ...crApi, name: id })) as SandboxResource;
      index.upsertResource(cr);
      return cr;
    } catch (err) {
      if (!isNotFound(err) || graceMs <= 0) throw toDomainError(err, "get sandbox", { kind: "sandbox", name: id });
    }
    // Accepted by another replica a moment ago: its record may still be on the way.
    for (let waited = 0; waited < graceMs; waited += 100) {
      await clock.sleep(100);
      const seen = index.resource(id);
      if (seen) return seen;
    }
    throw new NotFoundError("sandbox", id);
  };

  /** the pod to exec into; refuses sandboxes that are not running */
  const runningPod = async (id: string): Promise<{ cr: SandboxResource; podName: string }> => {
    const cr = await resource(id);
    const sb = index.sandbox(id);
    if (sb && (sb.phase === "Failed" || sb.phase === "Succeeded")) throw new SandboxFailedError(id, sb.reason ?? sb.phase, sb.message);
    if (!sb?.ready) throw new ConflictError(`sandbox ${id} is not ready (phase ${sb?.phase ?? "unknown"}${sb?.reason ? `, ${sb.reason}` : ""}); wait for it first`, { id });
    return { cr, podName: podNameOf(cr) };
  };

  const recordWriter = new RecordWriter({
    clock,
    logger,
    create: async (cr) => (await custom.createNamespacedCustomObject({ ...crApi, body: cr })) as SandboxResource,
    isConflict: (err) => statusCode(err) === 409,
    onWritten: (created) => {
      index.upsertResource(created);
      controller.enqueueSandbox(created.metadata.name);
    },
    onFailed: (id, reason, message) => {
      const cr = index.resource(id);
      logger.error({ sandbox: id, reason, err: message }, "sandbox record not written; the sandbox fails");
      if (cr) index.upsertResource({ ...cr, status: { ...(cr.status ?? {}), phase: "Failed", reason, message, finishedAt: clock.now().toISOString() } });
      const podName = cr?.spec.podName;
      if (podName) void core.deleteNamespacedPod({ name: podName, namespace: ns, gracePeriodSeconds: POD_DELETE_GRACE_SECONDS }).catch((e) => logger.warn({ pod: podName, err: String(e) }, "deleting the claimed pod of an unwritten sandbox failed; the orphan sweep will retry"));
    },
  });

  /**
   * Accepts the record: visible to this replica at once, persisted by the write-behind pool.
   * A repeated create with the same owner and clientKey returns the existing sandbox.
   */
  const acceptRecord = (spec: SandboxSpec, podName?: string, annotations: Record<string, string> = {}): void => {
    const existing = index.resource(spec.id);
    if (existing) {
      if (existing.spec.owner === spec.owner && existing.spec.clientKey && existing.spec.clientKey === spec.clientKey) return;
      throw new ConflictError(`sandbox ${spec.id} already exists; retry with the same clientKey to get it back, or use a new id`, { id: spec.id });
    }
    recordWriter.checkRoom();
    const body = buildSandboxResource(spec, ns, { podName });
    Object.assign(body.metadata.annotations!, annotations);
    index.upsertResource(body);
    recordWriter.enqueue(body);
  };

  const derived = (id: string): Sandbox => {
    const sb = index.sandbox(id);
    if (!sb) throw new UpstreamError(`sandbox ${id} was written but is missing from the local index; this is a bug`);
    return withActivity(sb);
  };

  /** archive transfers are killable like any exec: an abandoned tar must not keep running on a real kubelet */
  const markedRun =
    (id: string, podName: string): RunInSandbox =>
    async (argv, stdin) => {
      const execId = newExecId();
      const session = await runInPod(podName, ["env", `${EXEC_ID_VAR}=${execId}`, ...argv], stdin);
      return withProcessKill(session, { execId, run: (a) => runInPod(podName, a), clock, logger: logger.child({ sandbox: id, pod: podName }) });
    };

  const pooled = (spec: SandboxSpec): boolean =>
    config.warmPool.some((p) => labelSafe(p.profile) === labelSafe(spec.image.profile) && labelSafe(p.size) === labelSafe(spec.size.name) && p.count > 0);

  // pause/resume: the Sandbox object outlives its pod (runtime/k8s/pause.ts)
  const compute = createComputeRelease({ namespace: ns, core, custom, index, warmPool, clock, logger, resource: (id) => resource(id), pooled, derived });

  const backend: KubernetesBackend = {
    name: "kubernetes",
    controller,
    warmPool,
    records: recordWriter,
    snapshotRecords: new SandboxRecordStore({ namespace: ns, custom, index, settled: (id) => recordWriter.settled(id) }),
    snapshotHolder: identity,
    autoPauseStatus: new SandboxAutoPauseStore({ namespace: ns, custom, index }),
    leads: () => controller.isLeader(),

    async specOf(id) {
      const cr = index.resource(id);
      return cr ? specFromResource(cr) : undefined;
    },

    async releaseCompute(id) {
      await recordWriter.settled(id);
      await compute.releaseCompute(id);
    },

    adopt: (spec) => compute.adopt(spec),

    async start() {
      const pods = startSupervisedInformer<V1Pod>({
        name: "pods",
        kc,
        path: `/api/v1/namespaces/${ns}/pods`,
        labelSelector: `${LABELS.managed}=true`,
        list: () => core.listNamespacedPod({ namespace: ns, labelSelector: `${LABELS.managed}=true` }),
        clock,
        logger,
        onAdd: (p) => index.upsertPod(p),
        onUpdate: (p) => index.upsertPod(p),
        onDelete: (p) => index.deletePod(p),
      });
      // Custom objects arrive as plain JSON (timestamps are strings), hence the casts.
      const records = startSupervisedInformer<KubernetesObject>({
        name: "sandboxes",
        kc,
        path: `/apis/${API_GROUP}/${API_VERSION}/namespaces/${ns}/${SANDBOX_PLURAL}`,
        list: () => custom.listNamespacedCustomObject(crApi),
        clock,
        logger,
        onAdd: (cr) => index.upsertResource(cr as unknown as SandboxResource),
        onUpdate: (cr) => index.upsertResource(cr as unknown as SandboxResource),
        onDelete: (cr) => {
          activity.forget(cr.metadata!.name!);
          index.deleteResource(cr.metadata!.name!);
        },
      });
      informers = [pods, records] as SupervisedInformer<unknown>[];
      await Promise.all([pods.synced(30_000), records.synced(30_000)]);
      controller.start();
      activity.start();
    },

    async claim(spec) {
      if (closed) throw new UpstreamError(`the Kubernetes backend is closed; sandbox ${spec.id} was not created`);
      if (!pooled(spec)) return undefined;
      const pod = await warmPool.claim(spec);
      if (!pod) return undefined;
      const podName = pod.metadata!.name!;
      try {
        const annotations: Record<string, string> = {};
        if (deliverCredentials) annotations[ANNOTATIONS.credentialsExpiresAt] = (await deliverCredentials(spec.id, podName)).toISOString();
        acceptRecord(spec, podName, annotations);
      } catch (err) {
        // A claimed pod is never returned to the pool: it goes, and the error goes up.
        await core.deleteNamespacedPod({ name: podName, namespace: ns, gracePeriodSeconds: POD_DELETE_GRACE_SECONDS }).catch((e) => logger.warn({ pod: podName, err: String(e) }, "deleting a claimed pod after a failed claim failed; the orphan sweep will retry"));
        throw err;
      }
      return derived(spec.id);
    },

    async provision(spec) {
      if (closed) throw new UpstreamError(`the Kubernetes backend is closed; sandbox ${spec.id} was not created`);
      acceptRecord(spec);
      return derived(spec.id);
    },

    async awaitReady(id, opts: WaitOptions) {
      await resource(id, RECORD_VISIBILITY_GRACE_MS);
      return withActivity(await index.awaitReady(id, opts.timeoutMs, opts.signal));
    },

    async exec(id, req: ExecRequest): Promise<ExecSession> {
      const { cr, podName } = await runningPod(id);
      const baseEnv = { ...(cr.spec.env ?? {}), ...(config.credentials ? credentialsEnv(config.credentials, id) : {}) };
      // Closing the stream leaves the command running on a real kubelet: kill() also runs a
      // second exec that kills every process marked with this exec's id (execKill.ts).
      const execId = newExecId();
      const session = await runInPod(podName, buildExecArgv(req, baseEnv, execId), req.stdin, req.timeoutMs);
      return withProcessKill(session, { execId, timeoutMs: req.timeoutMs, run: (argv) => runInPod(podName, argv), clock, logger: logger.child({ sandbox: id, pod: podName }) });
    },

    async putArchive(id, dir, tar) {
      const { podName } = await runningPod(id);
      await putArchive(markedRun(id, podName), id, dir, tar);
    },

    async getArchive(id, path) {
      const { podName } = await runningPod(id);
      return getArchive(markedRun(id, podName), id, path);
    },

    async logs(id, opts: LogOptions) {
      const cr = await resource(id);
      const out = new PassThrough();
      try {
        await new Log(kc).log(ns, podNameOf(cr), SANDBOX_CONTAINER, out, { follow: !!opts.follow, ...(opts.tailLines !== undefined ? { tailLines: opts.tailLines } : {}) });
      } catch (err) {
        throw toDomainError(err, "read logs", { kind: "sandbox", name: id });
      }
      return out;
    },

    async delete(id) {
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

    subscribe(listener: (e: SandboxEvent) => void) {
      return index.subscribe(listener);
    },

    async poolStatus(): Promise<PoolStatus[]> {
      return warmPool.status();
    },

    async crash() {
      closed = true;
      recordWriter.abandon();
      await controller.stop();
      await Promise.all(informers.map((i) => i.stop()));
    },

    async close() {
      closed = true;
      await recordWriter.drain();
      await controller.stop();
      await activity.close();
      await Promise.all(informers.map((i) => i.stop()));
    },
  };
  return backend;
}

/** how long a wait on an unknown id looks for a record another replica just accepted */
const RECORD_VISIBILITY_GRACE_MS = 3_000;

/** profile -> image: the inline catalog, or the JSON file the Pulumi package writes (re-read, so edits apply) */
export function readCatalog(config: Pick<RuntimeConfig, "catalog" | "catalogPath">): Record<string, string> {
  if (!config.catalogPath) return config.catalog;
  try {
    return JSON.parse(readFileSync(config.catalogPath, "utf8")) as Record<string, string>;
  } catch (err) {
    throw new UpstreamError(`reading the image catalog ${config.catalogPath} failed: ${(err as Error).message}; fix the file or unset config.catalogPath`);
  }
}
