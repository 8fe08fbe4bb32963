// The warm pool: ready pods per (profile, size), claimed atomically and refilled by the
// leader. The claim reads candidates from the shared informer (no list per attempt), shuffles
// them so concurrent claimers spread out instead of fighting over the head, skips pods this
// process is already claiming, and takes one with a resourceVersion-guarded patch: a 409
// means someone else won that pod, so it moves on, a bounded number of times. A claimed pod
// is relabelled for good and never offered again.
import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { PoolStatus, SandboxSpec } from "../core/types.ts";
import type { Reservation } from "../k8s/claims/writeBehind.ts";
import { apiMessage, isConflict, isNotFound, mergePatch, statusCode } from "../k8s/client.ts";
import { ANNOTATIONS, LABELS, ownerLabelValue, POOL } from "../k8s/contract.ts";
import { POD_DELETE_GRACE_SECONDS, planWarmPod, remainingTtlSeconds } from "../k8s/podTemplate.ts";
import { labelSafe } from "../k8s/resource.ts";
import { poolKey, type SandboxIndex } from "../k8s/sandboxIndex.ts";
import { observePod } from "../k8s/status.ts";
import { type PoolTarget, planWarmPool } from "./warmPoolPlan.ts";

export interface WarmPoolOptions {
  index: SandboxIndex;
  core: CoreV1Api;
  config: Pick<RuntimeConfig, "kubernetes" | "warmPool" | "sizeClasses" | "defaults">;
  clock: Clock;
  logger: Logger;
  /** profile -> image now (the catalog can change while running) */
  resolveImage(profile: string): string | undefined;
  random?: () => number;
  maxClaimAttempts?: number;
  maxAgeMs?: number;
}

export interface ClaimStats {
  claims: number;
  misses: number;
  conflicts: number;
}

export class WarmPool {
  /** pods a claim in this process is patching right now */
  private readonly inFlight = new Set<string>();
  /** pods this process claimed: never offered again even before the informer catches up */
  private readonly taken = new Set<string>();
  readonly stats: ClaimStats = { claims: 0, misses: 0, conflicts: 0 };
  private readonly random: () => number;
  private readonly maxAttempts: number;
  readonly maxAgeMs: number;

  constructor(private readonly o: WarmPoolOptions) {
    this.random = o.random ?? Math.random;
    this.maxAttempts = o.maxClaimAttempts ?? 6;
    this.maxAgeMs = o.maxAgeMs ?? 6 * 3600 * 1000;
  }

  /** ready, unclaimed pool pods for spec that this process is neither claiming nor has claimed, shuffled */
  private candidates(spec: SandboxSpec): V1Pod[] {
    const key = poolKey(labelSafe(spec.image.profile), labelSafe(spec.size.name));
    const candidates = this.o.index
      .warmPods(key)
      .filter((p) => this.available(p) && p.spec?.containers?.[0]?.image === spec.image.image);
    shuffle(candidates, this.random);
    return candidates;
  }

  /** every ready, unclaimed pool pod `owns` accepts that this process is neither claiming nor has claimed */
  claimable(owns: (podName: string) => boolean): V1Pod[] {
    return this.o.index.warmPods().filter((p) => this.available(p) && owns(p.metadata!.name!));
  }

  /** ready, not being deleted, and neither being claimed nor claimed by this process */
  private available(p: V1Pod): boolean {
    const name = p.metadata!.name!;
    return !this.inFlight.has(name) && !this.taken.has(name) && !p.metadata?.deletionTimestamp && observePod(p).ready;
  }

  /**
   * Chooses a ready pod for spec in memory (runtime/k8s/claims): marked taken at once, so no
   * claim in this process is offered it again, whatever its patch's fate. The caller sends
   * write() behind; it is the same guarded patch as claim()'s.
   */
  reserve(spec: SandboxSpec, owns: (podName: string) => boolean): Reservation | undefined {
    const pod = this.candidates(spec).find((p) => owns(p.metadata!.name!));
    if (!pod) {
      this.stats.misses++;
      return undefined;
    }
    const name = pod.metadata!.name!;
    this.taken.add(name);
    const body = this.claimPatch(pod, spec) as { metadata: V1Pod["metadata"]; spec: { activeDeadlineSeconds: number } };
    const claimed: V1Pod = {
      ...pod,
      metadata: {
        ...pod.metadata,
        labels: { ...pod.metadata?.labels, ...body.metadata?.labels },
        annotations: { ...pod.metadata?.annotations, ...body.metadata?.annotations },
      },
      spec: { ...pod.spec!, activeDeadlineSeconds: body.spec.activeDeadlineSeconds },
    };
    const write = async (): Promise<V1Pod> => {
      try {
        const landed = await this.o.core.patchNamespacedPod(
          { name, namespace: this.o.config.kubernetes.namespace, body },
          mergePatch,
        );
        this.stats.claims++;
        return landed;
      } catch (err) {
        if (isConflict(err) || isNotFound(err)) this.stats.conflicts++;
        throw err;
      }
    };
    return { pod, claimed, write };
  }

  /** Takes a ready pool pod for spec, relabelled as this sandbox's; undefined when none could be had. */
  async claim(spec: SandboxSpec): Promise<V1Pod | undefined> {
    const candidates = this.candidates(spec);
    for (const pod of candidates.slice(0, this.maxAttempts)) {
      const name = pod.metadata!.name!;
      if (this.inFlight.has(name) || this.taken.has(name)) continue;
      this.inFlight.add(name);
      try {
        const claimed = await this.o.core.patchNamespacedPod(
          { name, namespace: this.o.config.kubernetes.namespace, body: this.claimPatch(pod, spec) },
          mergePatch,
        );
        this.taken.add(name);
        this.o.index.own.upsertPod(claimed);
        this.stats.claims++;
        return claimed;
      } catch (err) {
        if (isConflict(err) || isNotFound(err)) {
          this.stats.conflicts++;
          continue;
        }
        if (statusCode(err) === 422) {
          this.o.logger.warn({ pod: name, err: apiMessage(err) }, "warm pod refused the claim patch; trying another");
          continue;
        }
        throw err;
      } finally {
        this.inFlight.delete(name);
      }
    }
    this.stats.misses++;
    return undefined;
  }

  /** forget claimed names the informer no longer has, so the set stays bounded */
  prune(): void {
    for (const name of this.taken) if (!this.o.index.pod(name)) this.taken.delete(name);
  }

  status(): PoolStatus[] {
    return this.o.config.warmPool.map((t) => {
      const pods = this.o.index
        .warmPods(poolKey(labelSafe(t.profile), labelSafe(t.size)))
        .filter((p) => !p.metadata?.deletionTimestamp);
      const ready = pods.filter((p) => observePod(p).ready).length;
      return { profile: t.profile, size: t.size, target: t.count, ready, starting: pods.length - ready };
    });
  }

  /** Leader only: one refill round. Returns how long until the next look. */
  async refill(): Promise<{ requeueAfterMs: number }> {
    const targets: PoolTarget[] = [];
    for (const t of this.o.config.warmPool) {
      const image = this.o.resolveImage(t.profile);
      if (!image) {
        this.o.logger.error(
          { profile: t.profile },
          `warm pool profile ${t.profile} has no image in the catalog; add it to config.catalog or remove the pool`,
        );
        continue;
      }
      targets.push({ profile: t.profile, size: t.size, count: t.count, image });
    }
    const plan = planWarmPool({
      targets,
      pods: this.o.index.warmPods(),
      now: this.o.clock.now(),
      maxAgeMs: this.maxAgeMs,
      maxCreatesPerRound: 50,
    });
    const ns = this.o.config.kubernetes.namespace;
    const errors: string[] = [];
    const deadline = Math.ceil(this.maxAgeMs / 1000) + this.o.config.defaults.maxTtlSeconds;
    const creates = plan.create.flatMap(({ target, count }) =>
      Array.from({ length: count }, () =>
        planWarmPod(
          {
            profile: target.profile,
            image: target.image,
            size: this.o.config.sizeClasses[target.size],
            suffix: suffix(this.random),
            activeDeadlineSeconds: deadline,
          },
          this.o.config,
        ),
      ),
    );
    await Promise.all([
      ...creates.map((body) =>
        this.o.core.createNamespacedPod({ namespace: ns, body }).then(
          (p) => this.o.index.own.upsertPod(p),
          (err) => errors.push(`create ${body.metadata!.name}: ${apiMessage(err)}`),
        ),
      ),
      ...plan.delete.map((d) =>
        this.o.core
          .deleteNamespacedPod({ name: d.name, namespace: ns, gracePeriodSeconds: POD_DELETE_GRACE_SECONDS })
          .then(
            () => this.o.logger.info({ pod: d.name, why: d.why }, "deleted warm pod"),
            (err) => (isNotFound(err) ? undefined : errors.push(`delete ${d.name}: ${apiMessage(err)}`)),
          ),
      ),
    ]);
    this.prune();
    if (errors.length)
      throw new Error(`warm pool refill: ${errors.length} API calls failed: ${errors.slice(0, 3).join("; ")}`);
    return { requeueAfterMs: 30_000 };
  }

  private claimPatch(pod: V1Pod, spec: SandboxSpec): object {
    const now = this.o.clock.now();
    const started = pod.status?.startTime ? new Date(pod.status.startTime).getTime() : now.getTime();
    const elapsed = Math.max(0, Math.ceil((now.getTime() - started) / 1000));
    const current = pod.spec?.activeDeadlineSeconds ?? Infinity;
    // The deadline counts from the pod's start and may only be lowered: the pod must die at
    // the sandbox's hard expiry (createdAt + ttl; for a resumed sandbox that is not ttl from now).
    const deadline = Math.min(current, elapsed + remainingTtlSeconds(spec, now));
    return {
      metadata: {
        resourceVersion: pod.metadata!.resourceVersion,
        labels: { [LABELS.pool]: POOL.claimed, [LABELS.sandbox]: spec.id, [LABELS.owner]: ownerLabelValue(spec.owner) },
        annotations: {
          [ANNOTATIONS.owner]: spec.owner,
          [ANNOTATIONS.claimedAt]: now.toISOString(),
          [ANNOTATIONS.expiresAt]: new Date(spec.createdAt.getTime() + spec.ttlSeconds * 1000).toISOString(),
        },
      },
      spec: { activeDeadlineSeconds: deadline },
    };
  }
}

function shuffle<T>(a: T[], random: () => number): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
}

function suffix(random: () => number): string {
  const alphabet = "bcdfghjklmnpqrstvwxz2456789";
  let s = "";
  for (let i = 0; i < 6; i++) s += alphabet[Math.floor(random() * alphabet.length)];
  return s;
}
