// The Kubernetes Backend: exactly Backend's members, each a short call into the part that does
// the job. A create writes the Sandbox record (one API write, durable: the id we return always
// has a record behind it) and returns; the pod is made by the leader's reconciler right after,
// from the record, so a crash between the two converges. Readiness, status and events come from
// two shared informers (watch.ts) through the index (sandboxIndex.ts). Commands, files and ports
// go over the pod's command channel where the helper runs there (channel/), else one websocket
// exec or port-forward each (commands.ts, ports.ts). The parts are built and wired in assemble.ts;
// what pause/resume and replicas need is on the platform (runtime/platform.ts), not here.
import type { Readable } from "node:stream";
import { UpstreamError } from "../core/errors.ts";
import type {
  Backend,
  ExecRequest,
  ExecSession,
  LogOptions,
  MetadataPatch,
  PoolStatus,
  ResourceReading,
  Sandbox,
  SandboxEvent,
  SandboxSpec,
  WaitOptions,
  WarmClaimStats,
} from "../core/types.ts";
import type { Acceptor } from "./accept.ts";
import type { ActivityRecorder } from "./activity.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import type { WriteBehindClaims } from "./claims/writeBehind.ts";
import { isNotFound, type KubeClients, mergePatch, toDomainError } from "./client.ts";
import type { SandboxCommands } from "./commands.ts";
import { API_GROUP, API_VERSION, SANDBOX_PLURAL } from "./contract.ts";
import type { WarmPods } from "./control.ts";
import type { SandboxLookup } from "./lookup.ts";
import { POD_DELETE_GRACE_SECONDS } from "./podTemplate.ts";
import type { SandboxPorts } from "./ports.ts";
import type { SandboxReads } from "./reads.ts";
import { podNameOf, type SandboxResource } from "./resource.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

/** how long a wait on an unknown id looks for a record another replica just accepted */
const RECORD_VISIBILITY_GRACE_MS = 3_000;

/** The parts the backend delegates to (assemble.ts builds them). */
export interface KubernetesBackendParts {
  namespace: string;
  clients: Pick<KubeClients, "core" | "custom">;
  index: SandboxIndex;
  reads: SandboxReads;
  lookup: SandboxLookup;
  acceptor: Acceptor;
  claims: WriteBehindClaims;
  /** takes a warm pod for spec (true) or misses (false): claims/warmClaim.ts */
  claimWarm(spec: SandboxSpec): Promise<boolean>;
  /** true when a warm pool is configured for spec's profile and size */
  pooled(spec: SandboxSpec): boolean;
  /** the record's annotations: whose budget share admitted it */
  admitted(): Record<string, string>;
  /** waits until this replica's writes of the sandbox (claim, record) have settled */
  settled(id: string): Promise<void>;
  activity: ActivityRecorder;
  channels: SandboxChannels;
  /** warm pods' channels opened ahead of their claim; absent when off */
  primed?: { moved(): number; count(): number };
  warmPool: WarmPods;
  run: SandboxCommands;
  ports: SandboxPorts;
  commands: NonNullable<Backend["commands"]>;
  /** every running sandbox with an open channel, read in its pod (resourceReader.ts) */
  readResources(): Promise<ResourceReading[]>;
  /** starts the watch, the controller and the loops; stops them (runtime/k8s/assemble.ts) */
  lifecycle: { start(): Promise<void>; close(): Promise<void>; closed(): boolean };
}

export class KubernetesBackend implements Backend {
  readonly name = "kubernetes";
  readonly commands: NonNullable<Backend["commands"]>;

  constructor(private readonly k: KubernetesBackendParts) {
    this.commands = k.commands;
  }

  start(): Promise<void> {
    return this.k.lifecycle.start();
  }

  close(): Promise<void> {
    return this.k.lifecycle.close();
  }

  async claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    this.refuseWhenClosed(spec);
    if (!this.k.pooled(spec)) return undefined;
    return (await this.k.claimWarm(spec)) ? this.k.reads.derived(spec.id) : undefined;
  }

  async provision(spec: SandboxSpec): Promise<Sandbox> {
    this.refuseWhenClosed(spec);
    this.k.acceptor.accept(spec, undefined, this.k.admitted());
    return this.k.reads.derived(spec.id);
  }

  async awaitReady(id: string, opts: WaitOptions): Promise<Sandbox> {
    await this.k.lookup.resource(id, RECORD_VISIBILITY_GRACE_MS);
    return this.k.reads.seen(await this.k.index.awaitReady(id, opts.timeoutMs, opts.signal));
  }

  exec(id: string, req: ExecRequest): Promise<ExecSession> {
    return this.k.run.exec(id, req);
  }

  putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    return this.k.run.putArchive(id, dir, tar);
  }

  getArchive(id: string, path: string): Promise<Readable> {
    return this.k.run.getArchive(id, path);
  }

  logs(id: string, opts: LogOptions): Promise<Readable> {
    return this.k.run.logs(id, opts);
  }

  openPort(id: string, port: number) {
    return this.k.ports.openPort(id, port);
  }

  portStats() {
    return this.k.ports.portStats();
  }

  readResources(): Promise<ResourceReading[]> {
    return this.k.readResources();
  }

  async delete(id: string): Promise<void> {
    const { claims, acceptor, index, channels } = this.k;
    await claims.landed(id); // a claim still being written: its record is queued once it settles
    if (acceptor.records.cancel(id)) {
      index.own.deleteResource(id); // never written: nothing in the cluster to delete
      return;
    }
    await acceptor.records.settled(id);
    const local = index.resource(id);
    if (local && !local.metadata.uid) index.own.deleteResource(id); // its write failed: only we knew it
    const cr = index.resource(id) ?? local;
    this.k.activity.forget(id);
    channels.pool.forget(id);
    const results = await Promise.allSettled([
      this.k.clients.custom.deleteNamespacedCustomObject({ ...this.object(id), propagationPolicy: "Background" }),
      this.k.clients.core.deleteNamespacedPod({
        name: cr ? podNameOf(cr) : id,
        namespace: this.k.namespace,
        gracePeriodSeconds: POD_DELETE_GRACE_SECONDS,
      }),
    ]);
    const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected" && !isNotFound(r.reason));
    if (failure) throw toDomainError(failure.reason, "delete sandbox", { kind: "sandbox", name: id });
  }

  /**
   * From the index only: the informers are synced before start() returns and the index holds
   * this replica's own accepts, so this costs no API call on the create path.
   */
  async describe(id: string): Promise<Sandbox | undefined> {
    const sb = this.k.index.sandbox(id);
    return sb ? this.k.reads.seen(sb) : undefined;
  }

  async list(): Promise<Sandbox[]> {
    return this.k.index.sandboxes().map((sb) => this.k.reads.seen(sb));
  }

  async touch(id: string, at: Date): Promise<void> {
    this.k.activity.record(id, at);
  }

  /**
   * A JSON merge patch of spec.metadata's keys alone, without a resourceVersion guard: each key
   * is written whole, so two replicas changing different keys both land, and a guard would turn
   * every unrelated write (activity annotation, status) into a conflict retry for nothing. Two
   * writes of the same key: the later one wins, which is what a moved end or a token means.
   */
  async updateMetadata(id: string, patch: MetadataPatch): Promise<Sandbox> {
    await this.k.settled(id);
    try {
      const updated = await this.k.clients.custom.patchNamespacedCustomObject(
        { ...this.object(id), body: { spec: { metadata: patch } } },
        mergePatch,
      );
      this.k.index.own.upsertResource(updated as SandboxResource);
    } catch (err) {
      throw toDomainError(err, "update sandbox metadata", { kind: "sandbox", name: id });
    }
    return this.k.reads.derived(id);
  }

  subscribe(listener: (event: SandboxEvent) => void): () => void {
    return this.k.index.subscribe(listener);
  }

  async poolStatus(): Promise<PoolStatus[]> {
    return this.k.warmPool.status();
  }

  claimStats(): WarmClaimStats {
    return {
      ...this.k.claims.stats(),
      withChannel: this.k.primed?.moved() ?? 0,
      primedChannels: this.k.primed?.count() ?? 0,
    };
  }

  private object(name: string) {
    return { group: API_GROUP, version: API_VERSION, namespace: this.k.namespace, plural: SANDBOX_PLURAL, name };
  }

  private refuseWhenClosed(spec: SandboxSpec): void {
    if (this.k.lifecycle.closed())
      throw new UpstreamError(`the Kubernetes backend is closed; sandbox ${spec.id} was not created`);
  }
}
