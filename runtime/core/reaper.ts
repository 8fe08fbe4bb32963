// Reaper: deletes sandboxes past their hard TTL, idle past their idle timeout (activity = API
// calls on the sandbox, recorded by Backend.touch), and terminal ones after a grace. The
// decision is a pure plan from (sandboxes, now, config); the loop applies it and always hands
// capacity back to admission, so lifecycle never depends on the caller staying connected.
import type { Admission } from "./admission.ts";
import type { AuditStore } from "./audit.ts";
import type { Clock } from "./clock.ts";
import type { Logger } from "./log.ts";
import { type Backend, type Sandbox, TERMINAL_PHASES } from "./types.ts";

export type ReapReason = "ttl" | "idle" | "finished";

export interface ReapAction {
  id: string;
  owner: string;
  reason: ReapReason;
}

export interface ReapConfig {
  /** used when a sandbox does not carry its own idleTimeoutSeconds; 0 = never */
  idleTimeoutSeconds: number;
  finishedGraceSeconds: number;
}

/** Phases the reaper leaves alone: a kill is already under way, or a snapshot is moving. */
const IN_TRANSITION = new Set<Sandbox["phase"]>(["Terminating", "Pausing", "Resuming"]);

/**
 * Decide what to delete. `terminalSince` gives, for terminal sandboxes that carry no
 * finishedAt, when the reaper first saw them terminal. One action per sandbox, first reason
 * wins in the order finished > ttl > idle.
 */
export function planReap(
  sandboxes: readonly Sandbox[],
  now: Date,
  cfg: ReapConfig,
  terminalSince: ReadonlyMap<string, Date> = new Map(),
): ReapAction[] {
  const t = now.getTime();
  const actions: ReapAction[] = [];
  for (const s of sandboxes) {
    if (IN_TRANSITION.has(s.phase)) continue;
    const act = (reason: ReapReason) => actions.push({ id: s.id, owner: s.owner, reason });
    if (TERMINAL_PHASES.has(s.phase)) {
      const since = s.finishedAt ? Date.parse(s.finishedAt) : terminalSince.get(s.id)?.getTime();
      if (since === undefined || since + cfg.finishedGraceSeconds * 1000 <= t) act("finished");
      continue;
    }
    if (Date.parse(s.expiresAt) <= t) {
      act("ttl");
      continue;
    }
    // A paused sandbox holds no compute; idling is what paused it, so only TTL applies.
    if (s.phase === "Paused") continue;
    const idle = s.idleTimeoutSeconds ?? cfg.idleTimeoutSeconds;
    if (idle > 0) {
      const last = Date.parse(s.lastActivityAt ?? s.readyAt ?? s.createdAt);
      if (last + idle * 1000 <= t) act("idle");
    }
  }
  return actions;
}

export interface ReaperDeps {
  /** list and delete; the Manager passes its view, so paused sandboxes are reaped with their snapshots */
  backend: Pick<Backend, "list" | "delete">;
  admission: Admission;
  audit: AuditStore;
  clock: Clock;
  logger: Logger;
  config: ReapConfig;
  /** ids of creates still in flight: their reservations survive the budget reconcile */
  inFlight: () => ReadonlySet<string>;
  /** called with every listing the reaper takes (metrics use it for sandboxes by phase) */
  onList?: (sandboxes: readonly Sandbox[]) => void;
  onReap?: (action: ReapAction) => void;
  /** a sandbox's own idle timeout when the backend's Sandbox does not carry it */
  idleTimeoutFor?: (id: string) => number | undefined;
  intervalMs?: number;
  /** false: plan nothing, only reconcile the budget (a process that does not reap, e.g. the manager role). Default: always */
  shouldReap?: () => boolean;
}

export class Reaper {
  private readonly terminalSince = new Map<string, Date>();
  private stopped = new AbortController();
  private loop?: Promise<void>;

  constructor(private readonly deps: ReaperDeps) {}

  /** One pass: list, plan, delete, reconcile the budget with what is live. */
  // Over 60 lines on purpose: list, plan (pure, planReap), delete and reconcile in one pass; each step needs what the
  // one before found.
  async runOnce(): Promise<ReapAction[]> {
    const { backend, admission, clock, logger } = this.deps;
    const now = clock.now();
    const mark = admission.mark();
    const inFlightBefore = new Set(this.deps.inFlight());
    const all = await backend.list();
    this.deps.onList?.(all);
    const seen = new Set<string>();
    for (const s of all) {
      if (!TERMINAL_PHASES.has(s.phase)) continue;
      seen.add(s.id);
      if (!this.terminalSince.has(s.id)) this.terminalSince.set(s.id, now);
    }
    for (const id of this.terminalSince.keys()) if (!seen.has(id)) this.terminalSince.delete(id);

    const idleFor = this.deps.idleTimeoutFor;
    const withIdle = idleFor
      ? all.map((s) => (s.idleTimeoutSeconds === undefined ? { ...s, idleTimeoutSeconds: idleFor(s.id) } : s))
      : all;
    const reaps = this.deps.shouldReap?.() ?? true;
    const actions = reaps ? planReap(withIdle, now, this.deps.config, this.terminalSince) : [];
    for (const a of actions) {
      const log = logger.child({ sandbox: a.id, owner: a.owner, op: "reap" });
      try {
        await backend.delete(a.id);
        admission.release(a.id);
        this.terminalSince.delete(a.id);
        this.deps.audit.record({
          time: now.toISOString(),
          op: "reap",
          owner: a.owner,
          sandbox: a.id,
          outcome: "ok",
          details: { reason: a.reason },
        });
        this.deps.onReap?.(a);
        log.info({ reason: a.reason }, "reaped sandbox");
      } catch (err) {
        this.deps.audit.record({
          time: now.toISOString(),
          op: "reap",
          owner: a.owner,
          sandbox: a.id,
          outcome: "error",
          error: (err as { code?: string }).code ?? "internal",
          message: (err as Error).message,
          details: { reason: a.reason },
        });
        log.error({ err, reason: a.reason }, "reap failed; will retry next pass");
      }
    }
    // Missed events must not make the budget lie: whatever is not live (and not being
    // created right now) gives its reservation back; live sandboxes without one are adopted.
    const reaped = new Set(actions.map((a) => a.id));
    const live = all.filter((s) => !reaped.has(s.id));
    const keep = new Set([...inFlightBefore, ...this.deps.inFlight()]);
    const { adopted, released } = admission.rebuild(live, keep, mark);
    if (adopted.length || released.length)
      logger.info({ op: "admission.reconcile", adopted, released }, "admission budget reconciled with live sandboxes");
    return actions;
  }

  start(): void {
    if (this.loop) return;
    this.stopped = new AbortController();
    const signal = this.stopped.signal;
    const interval = this.deps.intervalMs ?? 5000;
    this.loop = (async () => {
      while (!signal.aborted) {
        try {
          await this.runOnce();
        } catch (err) {
          this.deps.logger.error({ op: "reap", err }, "reaper pass failed; retrying next interval");
        }
        try {
          await this.deps.clock.sleep(interval, signal);
        } catch {
          return; // aborted by stop()
        }
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped.abort(new Error("reaper stopped"));
    await this.loop;
    this.loop = undefined;
  }
}
