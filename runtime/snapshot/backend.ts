// Gives any Backend that can release and re-adopt compute the Backend.pause/resume the
// Manager calls, without the Manager knowing about snapshots:
//   - pause/resume go through the Snapshotter;
//   - describe/list answer Paused/Pausing/Resuming from the durable record;
//   - calls that need a running sandbox (exec, files, logs, wait) resume it first when it
//     allows auto-resume, else fail with a 409 naming the fix; once the Manager routes
//     auto-resume (routeAutoResume), that wake is the Manager's resume, so it passes admission;
//   - progress of a pause or resume reaches every caller waiting on it, also callers that
//     joined an operation another call started;
//   - delete removes the snapshot with the sandbox; start() runs crash recovery.
import type { Readable } from "node:stream";
import { ConflictError } from "../core/errors.ts";
import { ProgressFanout } from "../core/progress-fanout.ts";
import type {
  Backend,
  ExecRequest,
  ExecSession,
  LogOptions,
  PoolStatus,
  Sandbox,
  SandboxEvent,
  SandboxPhase,
  SandboxSpec,
  TransferOptions,
  WaitOptions,
} from "../core/types.ts";
import type { SnapshotRecord, SnapshotState } from "./record.ts";
import type { Snapshotter } from "./snapshotter.ts";

const PHASE: Record<Exclude<SnapshotState, "running">, SandboxPhase> = { pausing: "Pausing", paused: "Paused", resuming: "Resuming" };

/** The sandbox as callers should see it given its record; undefined = ask the backend. */
export function overlay(rec: SnapshotRecord | undefined): Sandbox | undefined {
  if (!rec || rec.state === "running") return undefined;
  return { ...rec.sandbox, phase: PHASE[rec.state], ready: false, cpuRequestMillis: rec.computeReleased ? 0 : rec.sandbox.cpuRequestMillis, memoryRequestBytes: rec.computeReleased ? 0 : rec.sandbox.memoryRequestBytes };
}

export class SnapshottingBackend implements Backend {
  readonly name: string;
  poolStatus?: () => Promise<PoolStatus[]>;
  /** set by routeAutoResume: the Manager's admission-checked resume */
  private autoResumer?: (id: string, op: string) => Promise<void>;
  /** every pause/resume call waiting on a sandbox's operation gets its progress */
  private readonly progress = new ProgressFanout();

  constructor(
    private readonly inner: Backend,
    readonly snapshotter: Snapshotter,
  ) {
    this.name = inner.name;
    if (inner.poolStatus) this.poolStatus = () => inner.poolStatus!();
  }

  async start(): Promise<void> {
    await this.inner.start();
    await this.snapshotter.recover();
  }

  claim(spec: SandboxSpec): Promise<Sandbox | undefined> {
    return this.inner.claim(spec);
  }
  provision(spec: SandboxSpec): Promise<Sandbox> {
    return this.inner.provision(spec);
  }
  async awaitReady(id: string, opts: WaitOptions): Promise<Sandbox> {
    await this.ensureRunning(id, "wait");
    return this.inner.awaitReady(id, opts);
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    await this.ensureRunning(id, "exec");
    return this.inner.exec(id, req);
  }
  async putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    await this.ensureRunning(id, "upload files");
    return this.inner.putArchive(id, dir, tar);
  }
  async getArchive(id: string, path: string): Promise<Readable> {
    await this.ensureRunning(id, "download files");
    return this.inner.getArchive(id, path);
  }
  async logs(id: string, opts: LogOptions): Promise<Readable> {
    await this.ensureRunning(id, "logs");
    return this.inner.logs(id, opts);
  }

  // The snapshotter shares one operation between concurrent calls and reports progress to the
  // call that started it; the fan-out lets a call that joined see the same bytes move.
  async pause(id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    const unlisten = this.progress.add(id, "pause", opts.onProgress);
    try {
      await this.snapshotter.pause(id, { onProgress: this.progress.sink(id) });
    } finally {
      unlisten();
    }
    return (await this.describe(id))!;
  }
  async resume(id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    const unlisten = this.progress.add(id, "resume", opts.onProgress);
    try {
      return await this.snapshotter.resume(id, { onProgress: this.progress.sink(id) });
    } finally {
      unlisten();
    }
  }

  routeAutoResume(resume: (id: string, op: string) => Promise<void>): void {
    this.autoResumer = resume;
  }

  /** The snapshotter reads the record before the sandbox goes (on Kubernetes the record goes with it). */
  delete(id: string): Promise<void> {
    return this.snapshotter.removeWith(id, () => this.inner.delete(id));
  }

  async describe(id: string): Promise<Sandbox | undefined> {
    return overlay(await this.snapshotter.status(id)) ?? this.inner.describe(id);
  }

  async list(): Promise<Sandbox[]> {
    const live = await this.inner.list();
    const records = new Map((await this.snapshotter.records()).map((r) => [r.id, r]));
    const out = live.map((s) => overlay(records.get(s.id)) ?? s);
    const seen = new Set(live.map((s) => s.id));
    for (const r of records.values()) {
      const o = overlay(r);
      if (o && !seen.has(r.id)) out.push(o);
    }
    return out;
  }

  touch(id: string, at: Date): Promise<void> {
    return this.inner.touch(id, at);
  }

  /** A backend reports a paused sandbox's compute as deleted; callers must see it as Paused. */
  subscribe(listener: (event: SandboxEvent) => void): () => void {
    return this.inner.subscribe((event) => {
      const id = event.type === "delete" ? event.id : event.sandbox.id;
      this.snapshotter.status(id).then(
        (rec) => {
          const o = overlay(rec);
          listener(o ? { type: "upsert", sandbox: o } : event);
        },
        () => listener(event),
      );
    });
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private async ensureRunning(id: string, what: string): Promise<void> {
    const rec = await this.snapshotter.status(id);
    if (!rec || rec.state === "running") return;
    if (!rec.autoResume) {
      throw new ConflictError(
        `${what}: sandbox ${id} is ${PHASE[rec.state].toLowerCase()} and does not allow auto-resume: resume it first (sbx resume ${id}), or create sandboxes with metadata sbx.auto-resume=true`,
        { id, phase: PHASE[rec.state] },
      );
    }
    if (this.autoResumer) await this.autoResumer(id, what);
    else await this.snapshotter.resume(id);
  }
}
