// The typed seams of the runtime. Manager (what the HTTP service and CLI call) sits on top
// of a Backend (compute substrate: Kubernetes or local), Admission, ImageCatalog and
// CredentialBroker. Everything here is plain data and interfaces: no I/O.
// Over 400 lines on purpose: Backend and Manager name most of these types in their signatures,
// so a second file would import this one and be imported by it, a cycle the import rules
// (.dependency-cruiser.cjs) refuse; every declaration is a doc comment and a few fields.
// Over 400 lines on purpose: the seams are read together (a Backend beside the Manager that
// calls it); each interface is short, and splitting them would only add imports.
import type { Duplex, Readable } from "node:stream";

/** Lifecycle phase of a sandbox as the substrate reports it. `ready` is separate. */
export type SandboxPhase =
  | "Pending" // accepted, compute not yet running
  | "Running" // compute running (see `ready` for whether it accepts work)
  | "Pausing" // snapshot in progress (pause/resume issue)
  | "Paused" // compute released, snapshot recorded
  | "Resuming"
  | "Failed" // terminal: OOMKilled, crashed, deadline, quota, ...
  | "Succeeded" // terminal: main process exited 0
  | "Terminating"; // kill in progress

export const TERMINAL_PHASES: ReadonlySet<SandboxPhase> = new Set(["Failed", "Succeeded"]);

/** A named resource shape. Quantities are plain numbers so admission math stays exact. */
export interface SizeClass {
  name: string;
  cpuRequestMillis: number;
  cpuLimitMillis: number;
  memoryRequestBytes: number;
  memoryLimitBytes: number;
  /** size limit of the writable /workspace */
  workspaceBytes: number;
  /** size limit of the writable /tmp */
  tmpBytes: number;
  /** max processes inside the sandbox */
  pids: number;
}

export interface ImageRef {
  profile: string;
  /** OCI reference (Kubernetes) or a local rootfs path / "host" (local backend) */
  image: string;
}

/** Everything a backend needs to start one sandbox. Built by the Manager, never by clients. */
export interface SandboxSpec {
  id: string;
  owner: string;
  image: ImageRef;
  size: SizeClass;
  env: Record<string, string>;
  /** hard time to live; also enforced by the substrate (activeDeadlineSeconds / local timer) */
  ttlSeconds: number;
  /** reaped after this many seconds without API activity on the sandbox; 0 = never */
  idleTimeoutSeconds: number;
  /** client-supplied idempotency key: retrying a create with it never makes a duplicate */
  clientKey?: string;
  /** free-form metadata the caller attached (validated keys/values) */
  metadata: Record<string, string>;
  createdAt: Date;
  /** automatic pause/wake policy as the caller wrote it (validated; runtime/autopause compiles it) */
  autoPause?: AutoPauseDocument;
}

/** An autoPause policy document (runtime/autopause/spec.ts AutoPauseInput), kept as JSON. */
export type AutoPauseDocument = Record<string, unknown>;

export interface Sandbox {
  id: string;
  owner: string;
  profile: string;
  size: string;
  phase: SandboxPhase;
  /** true once the sandbox accepts exec */
  ready: boolean;
  /** machine-readable reason for the phase, e.g. OOMKilled, Error, DeadlineExceeded, Evicted */
  reason?: string;
  message?: string;
  exitCode?: number;
  createdAt: string;
  readyAt?: string;
  expiresAt: string;
  lastActivityAt?: string;
  /** came from the warm pool */
  warm?: boolean;
  /** where it runs (node name or "local") */
  node?: string;
  clientKey?: string;
  metadata: Record<string, string>;
  /** reserved resources, for rebuilding the admission budget after a restart */
  cpuRequestMillis: number;
  memoryRequestBytes: number;
  /** per-sandbox idle timeout (seconds, 0 = never); the reaper falls back to config.defaults when absent */
  idleTimeoutSeconds?: number;
  /** when it became terminal (Failed/Succeeded); the reaper deletes it finishedGraceSeconds later */
  finishedAt?: string;
  /** the spec's autoPause policy; backends persist and return it so the controller finds it */
  autoPause?: AutoPauseDocument;
  /**
   * Kubernetes: how this replica runs commands in it, once it has: "helper" over one long-lived
   * channel, "exec" one websocket exec per command (the helper cannot run in its pod)
   */
  commandChannel?: "helper" | "exec";
}

export interface ExecRequest {
  command: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** bytes or a stream written to the command's stdin, then closed */
  stdin?: Uint8Array | Readable;
  /** kill the whole command (all its processes) after this long; exit code 124, timedOut true */
  timeoutMs?: number;
  /**
   * Opaque, kept with the command by a platform with an in-sandbox command registry (Kubernetes
   * over the helper; ignored elsewhere) and returned by Manager.listCommands while it runs; at
   * most 8192 characters of base64url. Not audited, never logged.
   */
  label?: string;
  /**
   * Run the command on a pseudo-terminal of this size (issue 32): its own session with the
   * terminal as its controlling one, TERM from env (default xterm-256color), and one merged
   * output stream on stdout (stderr stays empty). Absent: pipes, as always.
   */
  pty?: TerminalSize;
}

/** A terminal's window: columns and rows, each 1..TERMINAL_LIMITS.max (core/execInput.ts). */
export interface TerminalSize {
  cols: number;
  rows: number;
}

/** A command in a sandbox's own registry (Kubernetes: the pod's helper daemon), seen by every replica. */
export interface RegisteredCommand {
  id: string;
  /** its pid in the sandbox */
  pid: number;
  state: "running" | "exited";
  /** "exit:N" | "signal:N" | "timeout:N" | "killed:N" once exited */
  exit?: string;
  /** ExecRequest.label, while it runs */
  label?: string;
}

export interface CommandAttachOptions {
  /** output offsets to read from; 0 (the default) replays what the registry still holds */
  stdout?: number;
  stderr?: number;
  /**
   * at the end of the attach's stdin detach (the command goes on, unread until a reader
   * attaches), leaving its stdin open for another writer unless `endStdin`
   */
  thenDetach?: boolean;
  endStdin?: boolean;
}

/** A reader of a registered command: its output from the offsets on, its stdin, its end. */
export interface AttachedCommand extends ExecSession {
  readonly commandId: string;
  readonly pid: Promise<number>;
  /** the exit as RegisteredCommand.exit spells it, once the result came */
  readonly exit?: string;
}

export interface ExecResult {
  exitCode: number;
  timedOut: boolean;
  oomKilled: boolean;
  durationMs: number;
}

/** A running command. stdout/stderr stream as produced; `result` settles when it ends. */
export interface ExecSession {
  stdout: Readable;
  stderr: Readable;
  result: Promise<ExecResult>;
  /** ends the command and every process it started */
  kill(): void;
  /**
   * Present on a command started with ExecRequest.pty: sets its terminal's window (the kernel
   * sends SIGWINCH to the terminal's foreground job). Validated like ExecRequest.pty; a command
   * that ended ignores it (the caller knows from `result`).
   */
  resize?(size: TerminalSize): void;
  /** Present with a pty: a signal number for the terminal's foreground job (what ^C reaches) */
  signal?(sig: number): void;
}

export interface WaitOptions {
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface LogOptions {
  follow?: boolean;
  tailLines?: number;
}

/** Warm pool state for one (profile, size), as `sbx pool status` shows it. */
export interface PoolStatus {
  profile: string;
  size: string;
  /** configured number of ready slots */
  target: number;
  /** slots ready to be claimed now */
  ready: number;
  /** slots starting (not yet ready) */
  starting: number;
}

/** How far a pause or resume got for one writable path (the CLI shows it for large workspaces). */
export interface TransferProgress {
  op: "pause" | "resume";
  /** the writable path, e.g. /workspace */
  path: string;
  /** bytes of this path moved so far (cumulative, never decreasing) */
  bytes: number;
  /** this path's size when known: on resume (the snapshot layer's size); absent on pause */
  totalBytes?: number;
}

export interface TransferOptions {
  /**
   * Called as bytes move, possibly very often (callers throttle). It runs on the data path:
   * it must not block or throw (an exception fails the operation).
   */
  onProgress?(p: TransferProgress): void;
}

export type SandboxEvent = { type: "upsert"; sandbox: Sandbox } | { type: "delete"; id: string; owner: string };

/**
 * The compute substrate. One implementation per platform; the Manager holds all policy.
 * Every method is idempotent where it can be (delete of a gone sandbox resolves).
 */
/** Connections to sandbox ports opened since start, by the path that carries them (Kubernetes). */
export interface PortPathStats {
  /** over the pod's command channel */
  channel: number;
  /** over the API server's port-forward (pods where the helper cannot run) */
  portForward: number;
}

/**
 * Snapshot layers moved since start, by who moved the bytes: the sandbox's pod straight to the
 * registry (snapshots.podRegistry), or this replica (the archive path, and every fallback).
 */
export interface LayerPathStats {
  podPush: number;
  replicaPush: number;
  podRestore: number;
  replicaRestore: number;
}

/** Counts since start of warm claims whose durable write follows the decision. */
export interface WarmClaimStats {
  /** decided in memory */
  taken: number;
  /** their write landed */
  landed: number;
  /** lost the race (or the write failed): the sandbox moved to a cold start */
  lost: number;
  /** writes not settled yet */
  pending: number;
  /** claims that found their pod's command channel already open (runtime/k8s/channel/warmChannels.ts) */
  withChannel: number;
  /** warm pods' channels open or opening now, ahead of their claim */
  primedChannels: number;
}

/**
 * One raw reading of a live sandbox's resources (Backend.readResources): what its substrate counts,
 * before any arithmetic. CPU is a running total, so the sampler (core/resources.ts) turns two
 * readings into a rate. A figure the platform cannot read is absent, not zero.
 */
export interface ResourceReading {
  id: string;
  owner: string;
  /** CPU time used since the sandbox started, microseconds (monotonic while it lives) */
  cpuUsageUsec?: number;
  /** its CPU limit, millicores */
  cpuLimitMillis: number;
  /** memory charged to it, page cache included, bytes */
  memoryBytes?: number;
  /** of which page cache (file-backed, reclaimable in part), bytes */
  memoryCacheBytes?: number;
  /** what it cannot give back without swapping or being killed: usage minus inactive file cache */
  memoryWorkingSetBytes?: number;
  memoryLimitBytes: number;
  pids?: number;
  pidsLimit: number;
  /** /workspace bytes in use, and its size */
  workspaceUsedBytes?: number;
  workspaceBytes: number;
}

/** One point of a sandbox's figures (runtime/core/resources.ts). A figure the platform could not read is absent. */
export interface ResourceSample {
  /** when it was read, ISO 8601 */
  at: string;
  /** CPU cores used on average since the previous sample (absent on the first) */
  cpuCores?: number;
  /** cpuCores as a percentage of its CPU limit */
  cpuPct?: number;
  memoryBytes?: number;
  memoryCacheBytes?: number;
  memoryWorkingSetBytes?: number;
  /** the working set (else usage) as a percentage of the memory limit */
  memoryPct?: number;
  pids?: number;
  workspaceUsedBytes?: number;
}

/** What a sandbox may use: fixed by its size class. */
export interface ResourceLimits {
  cpuCores: number;
  memoryBytes: number;
  pids: number;
  workspaceBytes: number;
}

/** Something that happened to a sandbox's resources, kept with its history. */
export interface ResourceEvent {
  at: string;
  type: "memory-high";
  message: string;
}

/** A sandbox's resource history: what GET /v1/sandboxes/:id/metrics answers. */
export interface SandboxResources {
  id: string;
  /** how often it is sampled, ms */
  intervalMs: number;
  limits: ResourceLimits;
  /** oldest first */
  samples: ResourceSample[];
  events: ResourceEvent[];
}

/** One line of `sbx top`: a sandbox of the caller's with its newest sample, when it has one. */
export interface SandboxResourceLine {
  id: string;
  phase: SandboxPhase;
  limits: ResourceLimits;
  latest?: ResourceSample;
}

/** A time range of a metrics query, ms since the epoch; absent bounds are open. */
export interface ResourceRange {
  startMs?: number;
  endMs?: number;
}

export interface Backend {
  readonly name: string;
  /** Start serving: list what exists (for admission rebuild), open watches. */
  start(): Promise<void>;
  /** Warm fast path: take a pre-started slot matching spec, or undefined. */
  claim(spec: SandboxSpec): Promise<Sandbox | undefined>;
  /** Cold path: start compute for spec. Resolves once the substrate accepted it (not ready). */
  provision(spec: SandboxSpec): Promise<Sandbox>;
  /** Resolves when ready; rejects with a domain error when it becomes terminal or on timeout. */
  awaitReady(id: string, opts: WaitOptions): Promise<Sandbox>;
  exec(id: string, req: ExecRequest): Promise<ExecSession>;
  /** Unpack a tar stream into `dir` inside the sandbox. */
  putArchive(id: string, dir: string, tar: Readable): Promise<void>;
  /** Stream `path` (file or directory) out of the sandbox as a tar archive. */
  getArchive(id: string, path: string): Promise<Readable>;
  logs(id: string, opts: LogOptions): Promise<Readable>;
  delete(id: string): Promise<void>;
  describe(id: string): Promise<Sandbox | undefined>;
  list(): Promise<Sandbox[]>;
  /** Record API activity (idle timeout). Kubernetes stores it on the object so every replica sees it. */
  touch(id: string, at: Date): Promise<void>;
  /**
   * Merge `patch` into the sandbox's metadata in its durable record (a null value removes the
   * key) and resolve with the sandbox once the record holds it, so every replica and a restarted
   * process see it. The Manager has validated and owner-checked it. NotFoundError when it is gone.
   */
  updateMetadata?(id: string, patch: MetadataPatch): Promise<Sandbox>;
  /** Every change the substrate observes, including external deletes and crashes. */
  subscribe(listener: (event: SandboxEvent) => void): () => void;
  close(): Promise<void>;
  /** Warm pool state per (profile, size); absent when the backend has no pool. */
  poolStatus?(): Promise<PoolStatus[]>;
  /** Warm claims decided ahead of their durable write (Kubernetes); absent elsewhere. */
  claimStats?(): WarmClaimStats;
  /**
   * One reading of every live sandbox's resources, read in one pass at a cost independent of the
   * API server (runtime/core/resourceSampler.ts calls it every few seconds); absent where the
   * platform cannot read them. A sandbox it could not read this time is left out.
   */
  readResources?(): Promise<ResourceReading[]>;
  /** Port connections by path (Kubernetes); absent elsewhere. */
  portStats?(): PortPathStats;
  /**
   * A byte stream to TCP `port` on the sandbox's own loopback (docs/ports.md), resolved once
   * connected; only the sandbox's ports are reachable. Absent when the backend cannot relay.
   */
  openPort?(id: string, port: number): Promise<Duplex>;
  /** The sandbox's own command registry (Kubernetes over the helper); absent where there is none. */
  readonly commands?: {
    list(id: string): Promise<RegisteredCommand[] | undefined>;
    attach(
      id: string,
      commandId: string,
      stdin?: Readable,
      o?: CommandAttachOptions,
    ): Promise<AttachedCommand | undefined>;
  };
}

/**
 * The two things pause/resume asks of a platform's compute (runtime/platform.ts PauseSupport, with
 * the spec each sandbox was created with). Everything else (snapshots, the record, queues,
 * progress, auto-resume) is the pause/resume service's job, the same for every platform.
 */
export interface ComputeRelease {
  /**
   * Stop and remove the sandbox's compute and its writable storage but keep its identity (id,
   * owner, spec), so it can be adopted again. Idempotent: resolves when already released.
   */
  releaseCompute(id: string): Promise<void>;
  /**
   * Give the released sandbox spec.id compute again under the same id and owner: take a warm
   * slot of spec's profile and size when one exists, else start one. Resolves once the
   * substrate accepted it (then awaitReady). Writable paths start empty.
   */
  adopt(spec: SandboxSpec): Promise<Sandbox>;
  /**
   * true when the sandbox's object, its metadata with it, outlives the compute (the Kubernetes
   * Sandbox resource) and adopt() leaves that metadata alone: a metadata write while paused is
   * then what the resumed sandbox has. Without it a resume starts from the record's copy.
   */
  readonly keepsMetadata?: boolean;
}

/** The reads and the delete callers make of sandboxes (a Backend, or pause/resume's view of one). */
export interface SandboxView {
  describe(id: string): Promise<Sandbox | undefined>;
  list(): Promise<Sandbox[]>;
  subscribe(listener: (event: SandboxEvent) => void): () => void;
  delete(id: string): Promise<void>;
}

/** A caller's own steps, run in the sandbox's turn of the pause/resume queue around the operation. */
export interface TransitionHooks {
  /** runs first; a throw stops the operation before it starts (ownership, admission) */
  before?(): Promise<void> | void;
  /** runs after the operation failed, to undo what `before` did */
  failed?(): void;
  /** runs after the operation succeeded, still in the sandbox's turn */
  done?(): Promise<void> | void;
  /**
   * pause only: runs once the snapshot is written, before it is recorded, with its size; a throw
   * unwinds the pause (the snapshot is dropped, the sandbox keeps running). Paused quotas.
   */
  snapshotWritten?(sizeBytes: number): Promise<void> | void;
}

export type TransitionOptions = TransferOptions & TransitionHooks;

/** A sandbox as callers see it, and whether a call on it must wake it first (PauseResumeService.describeForCall). */
export interface SandboxForCall {
  sandbox: Sandbox | undefined;
  /** true when a call named `what` must wake the sandbox first; a ConflictError when it may not */
  wake(what: string): boolean;
}

/**
 * Pause/resume as the Manager owns and calls it (runtime/snapshot/service.ts): one queue per
 * sandbox, one progress fan-out, the one auto-resume decision, and the view of sandboxes with
 * their pause state applied.
 */
export interface PauseResumeService extends SandboxView {
  /** resolves once the sandbox is paused (with its pause record) */
  pause(id: string, opts?: TransitionOptions): Promise<unknown>;
  resume(id: string, opts?: TransitionOptions): Promise<Sandbox>;
  /** true when a call named `what` must wake the sandbox first; a ConflictError when it may not */
  wakeNeeded(id: string, what: string): Promise<boolean>;
  /**
   * describe() and wakeNeeded() from one read of the pause record: what a call on the sandbox
   * (exec, files, ports) needs before it reaches the backend.
   */
  describeForCall(id: string): Promise<SandboxForCall>;
  /** settles what a crash left mid-pause or mid-resume */
  recover(): Promise<void>;
  /** deletes paused sandboxes past the snapshot retention; their ids */
  expire(): Promise<string[]>;
  /** layers moved since start, by path */
  layerStats?(): LayerPathStats;
  /** the platform's ComputeRelease.keepsMetadata: a metadata write while paused is what the resumed sandbox has */
  readonly keepsMetadata: boolean;
  /** every sandbox whose snapshot is kept (paused, pausing, resuming), for paused quotas */
  pausedSnapshots?(): Promise<PausedSnapshot[]>;
}

/** A paused (or pausing, or resuming) sandbox's snapshot, as the pause/resume records hold it. */
export interface PausedSnapshot {
  id: string;
  owner: string;
  /** its metadata's stamped team (TEAM_METADATA_KEY), when its create's token named one */
  metadata?: Record<string, string>;
  /** bytes of its snapshot; 0 while its first pause is still writing it */
  sizeBytes: number;
}

export interface CreateRequest {
  owner: string;
  profile: string;
  size: string;
  env?: Record<string, string>;
  ttlSeconds?: number;
  idleTimeoutSeconds?: number;
  clientKey?: string;
  metadata?: Record<string, string>;
  /** automatic pause/wake policy (needs snapshots configured) */
  autoPause?: AutoPauseDocument;
  /** the team the caller's token named (a JWT's team claim): set by the service from the identity, never from a body */
  team?: string;
}

export interface ListFilter {
  owner: string;
}

/** A change to a sandbox's metadata: a string sets the key, null removes it. */
export type MetadataPatch = Record<string, string | null>;

/** What callers use: the HTTP service, the CLI direct mode, and the HTTP client all implement it. */
export interface Manager {
  create(req: CreateRequest): Promise<Sandbox>;
  wait(owner: string, id: string, opts: WaitOptions): Promise<Sandbox>;
  exec(owner: string, id: string, req: ExecRequest): Promise<ExecSession>;
  putArchive(owner: string, id: string, dir: string, tar: Readable): Promise<void>;
  getArchive(owner: string, id: string, path: string): Promise<Readable>;
  logs(owner: string, id: string, opts: LogOptions): Promise<Readable>;
  get(owner: string, id: string): Promise<Sandbox>;
  list(filter: ListFilter): Promise<Sandbox[]>;
  kill(owner: string, id: string): Promise<void>;
  /**
   * Change a running sandbox's metadata after create (validated, owner-checked, audited, durable).
   * `whilePaused`: also while it is paused, where the backend keeps metadata across a pause
   * (ComputeRelease.keepsMetadata); for keys the resume does not read (port exposures).
   */
  updateMetadata?(owner: string, id: string, patch: MetadataPatch, opts?: { whilePaused?: boolean }): Promise<Sandbox>;
  /**
   * Every owner's sandboxes that carry metadata key `key`: for system processes that act on a
   * layer's own sandboxes (the E2B timeout sweeper). No HTTP route calls it.
   */
  listMarked?(key: string): Promise<Sandbox[]>;
  /** A sandbox's resource history in `range` (owner-checked; never wakes or touches it); absent: no sampler. */
  resources?(owner: string, id: string, range?: ResourceRange): Promise<SandboxResources>;
  /** Every sandbox of the owner with its newest sample (`sbx top`). */
  resourceLines?(owner: string): Promise<SandboxResourceLine[]>;
  /** Warm pool state; absent when the backend has no pool. */
  poolStatus?(): Promise<PoolStatus[]>;
  pause?(owner: string, id: string, opts?: TransferOptions): Promise<Sandbox>;
  resume?(owner: string, id: string, opts?: TransferOptions): Promise<Sandbox>;
  /** A connection to a port inside the sandbox (docs/ports.md); wakes a paused one that allows it. */
  openPort?(owner: string, id: string, port: number): Promise<Duplex>;
  /**
   * The sandbox's own command registry, owner-checked (a paused sandbox is woken); undefined
   * where the sandbox has none (the local platform, a pod on the per-exec path).
   */
  listCommands?(owner: string, id: string): Promise<RegisteredCommand[] | undefined>;
  /** Reads (and with `stdin` writes) a registered command; its result rejects when another reader takes it. */
  attachCommand?(
    owner: string,
    id: string,
    commandId: string,
    stdin?: Readable,
    o?: CommandAttachOptions,
  ): Promise<AttachedCommand | undefined>;
}
