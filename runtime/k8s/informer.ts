// One shared informer per resource kind, supervised: client-node's ListWatch stops for good
// on a non-410 error, so this restarts it with exponential backoff (injected clock) and
// logs every failure. A watch never goes quiet without a log line saying why.
import {
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  makeInformer,
  type ObjectCache,
} from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";

export interface SupervisedInformerOptions<T extends KubernetesObject> {
  name: string;
  kc: KubeConfig;
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  clock: Clock;
  logger: Logger;
  onAdd(obj: T): void;
  onUpdate(obj: T): void;
  onDelete(obj: T): void;
  /**
   * Trims an object in place as it arrives from the list or the watch, before the handlers see
   * it. client-node's cache has already stored that same object, so this shrinks what the cache
   * and the handlers keep (e.g. trimForCache: managedFields, most of a pod's objects).
   */
  transform?(obj: T): void;
  /** first backoff after a failure; doubles up to maxBackoffMs */
  baseBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface SupervisedInformer<T> {
  cache: ObjectCache<T>;
  /** resolves after the first complete list; rejects if that list keeps failing past timeoutMs */
  synced(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

// Over 60 lines on purpose: the informer, its restart backoff and its stop share their state in this closure.
export function startSupervisedInformer<T extends KubernetesObject>(
  o: SupervisedInformerOptions<T>,
): SupervisedInformer<T> {
  const informer: Informer<T> & ObjectCache<T> & { latestResourceVersion?: () => string } = makeInformer(
    o.kc,
    o.path,
    o.list,
    o.labelSelector,
  );
  const base = o.baseBackoffMs ?? 500;
  const max = o.maxBackoffMs ?? 30_000;
  let backoff = base;
  let stopped = false;
  let lastError: unknown;
  const abort = new AbortController();
  let syncWaiters: (() => void)[] = [];
  const isSynced = () => !!informer.latestResourceVersion?.();

  const settleSync = () => {
    if (!isSynced()) return;
    backoff = base;
    const ws = syncWaiters;
    syncWaiters = [];
    for (const w of ws) w();
  };
  const trim = o.transform ?? (() => undefined);
  informer.on("add", (obj) => {
    trim(obj);
    o.onAdd(obj);
  });
  informer.on("update", (obj) => {
    trim(obj);
    o.onUpdate(obj);
    settleSync();
  });
  informer.on("delete", (obj) => o.onDelete(obj));
  informer.on("error", (err) => {
    lastError = err;
    if (stopped) return;
    const delay = backoff;
    backoff = Math.min(backoff * 2, max);
    o.logger.warn(
      { informer: o.name, err: String((err as Error)?.message ?? err), retryInMs: delay },
      "watch failed; restarting after backoff",
    );
    o.clock.sleep(delay, abort.signal).then(
      () => (stopped ? undefined : run()),
      () => undefined, // aborted by stop(): nothing to restart
    );
  });

  const run = async () => {
    try {
      await informer.start();
      settleSync();
    } catch (err) {
      // start() reports list/watch failures through the error callback; anything thrown
      // here is a bug in our wiring and must not vanish.
      o.logger.error({ informer: o.name, err: String(err) }, "informer start threw");
    }
  };
  void run();

  return {
    cache: informer,
    synced: (timeoutMs) =>
      new Promise<void>((resolve, reject) => {
        if (isSynced()) return resolve();
        const timer = setTimeout(() => {
          syncWaiters = syncWaiters.filter((w) => w !== done);
          reject(
            new Error(
              `informer ${o.name} (${o.path}) did not complete its first list within ${timeoutMs} ms: ${lastError ? String((lastError as Error).message ?? lastError) : "no error reported"}; check the API server address and RBAC (list/watch)`,
            ),
          );
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        syncWaiters.push(done);
      }),
    stop: async () => {
      stopped = true;
      abort.abort(new Error("informer stopped"));
      await informer.stop();
    },
  };
}

/**
 * What no replica reads of a cached object: `metadata.managedFields`, the server-side-apply
 * bookkeeping of every writer (ours, the scheduler's, the kubelet's). On the test cluster it is
 * 130 of a sandbox pod's 176 JSON objects and 44 of a Sandbox record's 53; a real kubelet's status
 * updates add more. Every replica caches every sandbox's pod and record, so it is most of what
 * 1,000 sandboxes cost the heap (docs/kubernetes-runtime.md, "Memory").
 */
export function trimForCache(obj: KubernetesObject): void {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
}
