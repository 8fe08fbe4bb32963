// The in-memory view of every sandbox record and sandbox pod. One writer feeds it, the two shared
// informers (`watched`, written by watch.ts alone); this replica's own API responses go to an
// explicit overlay (`own`), so a caller's next read sees its own write until the watch delivers
// that object or a newer one, which replaces it. Derives each sandbox's status, emits
// SandboxEvents when it changes, and wakes readiness waiters: one watch per kind, never a poll.
import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import { NotFoundError, SandboxFailedError, TimeoutError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Sandbox, SandboxEvent } from "../core/types.ts";
import { LABELS, POOL } from "./contract.ts";
import type { SandboxResource } from "./resource.ts";
import { podNameOf, poolKey } from "./resource.ts";
import { deriveSandbox } from "./status.ts";

type Waiter = (sb: Sandbox | undefined) => void;

// poolKey lives in resource.ts (pure) so the pure warm-pool planner need not import this index.
export { poolKey };

/** Writes into the index: the watch's (`SandboxIndex.watched`) or this replica's own (`SandboxIndex.own`). */
export interface IndexFeed {
  upsertResource(cr: SandboxResource): void;
  deleteResource(id: string): void;
  upsertPod(pod: V1Pod): void;
  deletePod(pod: V1Pod): void;
}

export class SandboxIndex {
  /** what the informers delivered */
  private readonly crs = new Map<string, SandboxResource>();
  private readonly pods = new Map<string, V1Pod>();
  /** this replica's own writes the watch has not delivered yet; a read prefers them */
  private readonly ownCrs = new Map<string, SandboxResource>();
  private readonly ownPods = new Map<string, V1Pod>();
  /** sandbox id -> pod name, for pods carrying the sandbox label (cold, or claimed) */
  private readonly podOfSandbox = new Map<string, string>();
  private readonly derived = new Map<string, Sandbox>();
  private readonly listeners = new Set<(e: SandboxEvent) => void>();
  private readonly keyListeners = new Set<(kind: "sandbox" | "pool", key: string) => void>();
  private readonly waiters = new Map<string, Set<Waiter>>();

  constructor(private readonly opts: { credentialsRequired: boolean; clock: Clock; logger: Logger }) {}

  // ---- feeding ----
  /** The one writer of the watched state: the informers (watch.ts). A delivered object replaces an own write it is not older than. */
  readonly watched: IndexFeed = {
    upsertResource: (cr) => {
      const id = cr.metadata.name;
      const prev = this.crs.get(id);
      if (prev && isOlder(cr.metadata.resourceVersion, prev.metadata.resourceVersion)) return;
      this.crs.set(id, cr);
      const own = this.ownCrs.get(id);
      if (own && !isOlder(cr.metadata.resourceVersion, own.metadata.resourceVersion)) this.ownCrs.delete(id);
      this.refresh(id);
    },
    deleteResource: (id) => {
      const had = this.resource(id);
      this.crs.delete(id);
      this.ownCrs.delete(id);
      this.removed(id, had);
    },
    upsertPod: (pod) => {
      const name = pod.metadata!.name!;
      const prev = this.pods.get(name);
      if (prev && isOlder(pod.metadata?.resourceVersion, prev.metadata?.resourceVersion)) return;
      this.pods.set(name, pod);
      const own = this.ownPods.get(name);
      if (own && !isOlder(pod.metadata?.resourceVersion, own.metadata?.resourceVersion)) this.ownPods.delete(name);
      this.podChanged(this.pod(name)!);
    },
    deletePod: (pod) => {
      const name = pod.metadata!.name!;
      this.pods.delete(name);
      this.ownPods.delete(name);
      this.podGone(pod);
    },
  };

  /** This replica's own writes (API responses, records not yet written), read until the watch replaces them. */
  readonly own: IndexFeed = {
    upsertResource: (cr) => {
      const id = cr.metadata.name;
      const prev = this.resource(id);
      if (prev && isOlder(cr.metadata.resourceVersion, prev.metadata.resourceVersion)) return;
      this.ownCrs.set(id, cr);
      this.refresh(id);
    },
    // a record only this replica knew (never written, or its write failed): what the watch has stays
    deleteResource: (id) => {
      const had = this.resource(id);
      if (!this.ownCrs.delete(id)) return;
      if (this.crs.has(id)) this.refresh(id);
      else this.removed(id, had);
    },
    upsertPod: (pod) => {
      const name = pod.metadata!.name!;
      const prev = this.pod(name);
      if (prev && isOlder(pod.metadata?.resourceVersion, prev.metadata?.resourceVersion)) return;
      this.ownPods.set(name, pod);
      this.podChanged(pod);
    },
    deletePod: (pod) => {
      const name = pod.metadata!.name!;
      if (!this.ownPods.delete(name)) return;
      const seen = this.pods.get(name);
      if (seen) this.podChanged(seen);
      else this.podGone(pod);
    },
  };

  // ---- reading ----
  resource(id: string): SandboxResource | undefined {
    return this.ownCrs.get(id) ?? this.crs.get(id);
  }

  /** the pod carrying this sandbox, if the informer has seen it */
  podOf(id: string): V1Pod | undefined {
    const cr = this.resource(id);
    const name = cr ? podNameOf(cr) : this.podOfSandbox.get(id);
    const pod = name ? this.pod(name) : undefined;
    // A warm pod only counts once the claim is visible (its sandbox label is ours).
    if (pod && cr?.spec.podName && pod.metadata?.labels?.[LABELS.sandbox] !== id) return undefined;
    return pod;
  }

  pod(name: string): V1Pod | undefined {
    return this.ownPods.get(name) ?? this.pods.get(name);
  }

  sandbox(id: string): Sandbox | undefined {
    return this.derived.get(id);
  }

  sandboxes(): Sandbox[] {
    return [...this.derived.values()];
  }

  resourceIds(): string[] {
    return [...new Set([...this.crs.keys(), ...this.ownCrs.keys()])];
  }

  /** pods labelled with a sandbox id that has no record (claims whose create never landed, or leftovers) */
  podsWithoutRecord(): V1Pod[] {
    const out: V1Pod[] = [];
    for (const [id, name] of this.podOfSandbox) {
      if (!this.resource(id)) {
        const p = this.pod(name);
        if (p) out.push(p);
      }
    }
    return out;
  }

  /** unclaimed pool pods, per pool key */
  warmPods(key?: string): V1Pod[] {
    const out: V1Pod[] = [];
    for (const name of new Set([...this.pods.keys(), ...this.ownPods.keys()])) {
      const p = this.pod(name)!;
      const pk = poolOf(p);
      if (pk && (key === undefined || pk === key) && p.metadata?.labels?.[LABELS.pool] === POOL.warm) out.push(p);
    }
    return out;
  }

  // ---- subscribing ----
  subscribe(listener: (e: SandboxEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** the controller's hook: which keys changed */
  onKey(listener: (kind: "sandbox" | "pool", key: string) => void): () => void {
    this.keyListeners.add(listener);
    return () => this.keyListeners.delete(listener);
  }

  /**
   * Resolves with the sandbox once ready; rejects with SandboxFailedError when it becomes
   * terminal, NotFoundError when its record goes away, TimeoutError after timeoutMs.
   */
  awaitReady(id: string, timeoutMs: number, signal?: AbortSignal): Promise<Sandbox> {
    const now = this.derived.get(id);
    const verdict = now ? readiness(now) : undefined;
    if (verdict) return verdict;
    return new Promise<Sandbox>((resolve, reject) => {
      const stop = new AbortController();
      const set = this.waiters.get(id) ?? new Set<Waiter>();
      this.waiters.set(id, set);
      const finish = () => {
        set.delete(waiter);
        if (set.size === 0) this.waiters.delete(id);
        stop.abort();
        signal?.removeEventListener("abort", onAbort);
      };
      const waiter: Waiter = (sb) => {
        if (!sb) {
          finish();
          return reject(new NotFoundError("sandbox", id));
        }
        const v = readiness(sb);
        if (!v) return;
        finish();
        v.then(resolve, reject);
      };
      const onAbort = () => {
        finish();
        reject(signal!.reason ?? new Error("wait aborted"));
      };
      set.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.opts.clock.sleep(timeoutMs, stop.signal).then(
        () => {
          finish();
          const sb = this.derived.get(id);
          reject(
            new TimeoutError(
              `sandbox ${id} not ready after ${timeoutMs} ms (phase ${sb?.phase ?? "unknown"}${sb?.reason ? `, ${sb.reason}` : ""}); wait again or check its events`,
            ),
          );
        },
        () => undefined,
      );
    });
  }

  // ---- internals ----
  private removed(id: string, had: SandboxResource | undefined): void {
    const last = this.derived.get(id);
    this.derived.delete(id);
    if (had) this.emit({ type: "delete", id, owner: had.spec.owner });
    else if (last) this.emit({ type: "delete", id, owner: last.owner });
    this.wake(id, undefined);
    this.notifyKey("sandbox", id);
  }

  private podChanged(pod: V1Pod): void {
    const id = pod.metadata?.labels?.[LABELS.sandbox];
    if (id) {
      this.podOfSandbox.set(id, pod.metadata!.name!);
      this.refresh(id);
    }
    const pk = poolOf(pod);
    if (pk) this.notifyKey("pool", pk);
  }

  private podGone(pod: V1Pod): void {
    const name = pod.metadata!.name!;
    const id = pod.metadata?.labels?.[LABELS.sandbox];
    if (id && this.podOfSandbox.get(id) === name) {
      this.podOfSandbox.delete(id);
      this.refresh(id);
    }
    const pk = poolOf(pod);
    if (pk) this.notifyKey("pool", pk);
  }

  private refresh(id: string): void {
    this.notifyKey("sandbox", id);
    const cr = this.resource(id);
    if (!cr) return; // a claimed pod whose record is not written yet: not a sandbox to anyone
    const sb = deriveSandbox(cr, this.podOf(id), { credentialsRequired: this.opts.credentialsRequired });
    const prev = this.derived.get(id);
    this.derived.set(id, sb);
    if (!prev || !sameSandbox(prev, sb)) this.emit({ type: "upsert", sandbox: sb });
    this.wake(id, sb);
  }

  private wake(id: string, sb: Sandbox | undefined): void {
    const set = this.waiters.get(id);
    if (!set) return;
    for (const w of [...set]) w(sb);
  }

  private emit(e: SandboxEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.opts.logger.error({ err: String(err), event: e.type }, "sandbox event listener threw");
      }
    }
  }

  private notifyKey(kind: "sandbox" | "pool", key: string): void {
    for (const l of this.keyListeners) l(kind, key);
  }
}

function readiness(sb: Sandbox): Promise<Sandbox> | undefined {
  if (sb.ready) return Promise.resolve(sb);
  if (sb.phase === "Failed" || sb.phase === "Succeeded") {
    return Promise.reject(new SandboxFailedError(sb.id, sb.reason ?? sb.phase, sb.message));
  }
  return undefined;
}

function poolOf(pod: V1Pod): string | undefined {
  const l = pod.metadata?.labels;
  if (!l?.[LABELS.pool]) return undefined;
  return poolKey(l[LABELS.profile] ?? "", l[LABELS.size] ?? "");
}

/** resourceVersions are opaque, but etcd-backed ones are integers: use that when both are. */
function isOlder(incoming: string | undefined, current: string | undefined): boolean {
  if (!incoming || !current || !/^\d+$/.test(incoming) || !/^\d+$/.test(current)) return false;
  return BigInt(incoming) < BigInt(current);
}

function sameSandbox(a: Sandbox, b: Sandbox): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
