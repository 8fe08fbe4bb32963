// Every slot the local backend knows (warm, claimed, and dead-but-not-deleted ones), by slot key
// and by sandbox id, and how a known slot ends: its time to live, its death (why, releasing its
// processes, the record, the event), its removal. The backend's verbs find their slots here;
// subscribers hear every change from here.
import type { Clock } from "../core/clock.ts";
import { ConflictError, NotFoundError, SandboxFailedError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxEvent } from "../core/types.ts";
import { type CgroupLayout, childDirs, oomKills } from "./cgroups.ts";
import { type SandboxRecord, writeRecordOrLog, writeRecordSync } from "./records.ts";
import { Slot, type SlotEnv } from "./slot.ts";

export interface SlotTableDeps {
  logger: Logger;
  clock: Clock;
  /** the first uid of this state directory's block (records.ts uidBlockBase) */
  uidBase: number;
  /** the warm pool: a slot that dies there leaves it */
  pool: { remove(slot: Slot): void };
  /** the cgroup layout once the backend started: an OOM kill is read from it */
  layout(): CgroupLayout | undefined;
  /** true once the backend is closing: every death is then its own doing, not news */
  closed(): boolean;
}

export class SlotTable {
  readonly byKey = new Map<string, Slot>();
  /** claimed and provisioned slots, by the id of their sandbox */
  readonly byId = new Map<string, Slot>();
  private readonly listeners = new Set<(e: SandboxEvent) => void>();
  private readonly ttls = new Map<string, AbortController>();

  constructor(private readonly d: SlotTableDeps) {}

  get(id: string): Slot {
    const slot = this.byId.get(id);
    if (!slot) throw new NotFoundError("sandbox", id);
    return slot;
  }

  failed(slot: Slot): SandboxFailedError {
    const sb = slot.rec.sandbox;
    return new SandboxFailedError(
      sb?.id ?? slot.rec.key,
      sb?.reason ?? slot.deathReason ?? "Error",
      sb?.message ?? slot.deathMessage,
    );
  }

  allocateUid(): number {
    const used = new Set([...this.byKey.values()].map((s) => s.rec.uid));
    for (let i = 0; i < 65_536; i++) if (!used.has(this.d.uidBase + i)) return this.d.uidBase + i;
    throw new ConflictError(
      "local backend: all 65536 sandbox uids of this state directory are in use; delete sandboxes first",
    );
  }

  /** Prepares, records and launches a new slot (known by `id` when it is a sandbox); a failed step destroys and forgets it. */
  async launch(env: SlotEnv, rec: SandboxRecord, id?: string): Promise<Slot> {
    const slot = new Slot(env, rec);
    this.byKey.set(rec.key, slot);
    if (id) this.byId.set(id, slot);
    slot.onDeath(() => this.onDeath(slot));
    try {
      await slot.prepare();
      // synchronous: a few hundred bytes, and the thread pool is slow to get to on a busy host
      writeRecordSync(slot.paths, rec);
      slot.launch();
    } catch (err) {
      await slot.destroy();
      this.byKey.delete(rec.key);
      if (id) this.byId.delete(id);
      throw err;
    }
    return slot;
  }

  /** A Slot object for a directory a previous process left, known and watched from now on. */
  adopt(env: SlotEnv, key: string, record: SandboxRecord): Slot {
    const slot = new Slot(env, record);
    this.byKey.set(key, slot);
    slot.onDeath(() => this.onDeath(slot));
    return slot;
  }

  armTtl(slot: Slot): void {
    const sb = slot.rec.sandbox!;
    const ctl = new AbortController();
    this.ttls.set(slot.rec.key, ctl);
    const ms = Math.max(0, Date.parse(sb.expiresAt) - this.d.clock.now().getTime());
    this.d.clock.sleep(ms, ctl.signal).then(
      () => {
        if (slot.state === "dead") return;
        slot.deathReason = "DeadlineExceeded";
        slot.deathMessage = `the sandbox reached its time to live (expired at ${sb.expiresAt})`;
        this.d.logger.info({ sandbox: sb.id, owner: sb.owner, op: "ttl" }, "sandbox expired");
        void slot.stop();
      },
      () => {},
    );
  }

  /** At close: no sandbox expires while the backend stops them all. */
  disarmAll(): void {
    for (const c of this.ttls.values()) c.abort();
  }

  /** Destroys the sandbox's slot and forgets it; an unknown id is already gone. */
  async remove(id: string): Promise<void> {
    const slot = this.byId.get(id);
    if (!slot) return;
    const owner = slot.rec.sandbox!.owner;
    this.ttls.get(slot.rec.key)?.abort();
    this.ttls.delete(slot.rec.key);
    await slot.destroy();
    this.byId.delete(id);
    this.byKey.delete(slot.rec.key);
    for (const l of this.listeners) l({ type: "delete", id, owner });
  }

  subscribe(listener: (event: SandboxEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  emit(slot: Slot): void {
    const sandbox = slot.rec.sandbox;
    if (!sandbox) return;
    for (const l of this.listeners) l({ type: "upsert", sandbox: { ...sandbox } });
  }

  /** A slot's helper is gone: decide why, release its processes and cgroups, tell subscribers. */
  private onDeath(slot: Slot): void {
    const sb = slot.rec.sandbox;
    this.d.pool.remove(slot);
    if (!sb) {
      this.byKey.delete(slot.rec.key);
      if (!slot.stopping) void slot.destroy();
      return;
    }
    if (this.d.closed() || !this.byId.has(sb.id) || (slot.stopping && !slot.deathReason)) return;
    const layout = this.d.layout();
    const oom = layout && oomKills(layout, childDirs(slot.dirs, "init")) > 0;
    const reason = slot.deathReason ?? (oom ? "OOMKilled" : "Error");
    const message =
      slot.deathMessage ??
      (oom
        ? "the sandbox's init was killed for exceeding its memory limit"
        : `the sandbox's init exited unexpectedly: ${slot.logTail(2)}`);
    slot.rec.sandbox = { ...sb, phase: "Failed", ready: false, reason, message };
    this.d.logger.warn({ sandbox: sb.id, owner: sb.owner, reason }, "sandbox stopped");
    if (!slot.stopping) void slot.stop();
    void writeRecordOrLog(slot.paths, slot.rec, this.d.logger, `failed: ${reason}`);
    this.emit(slot);
  }
}
