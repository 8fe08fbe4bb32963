// What the warm pool refill does next, from (targets, unclaimed pool pods, now). Pure.
import type { V1Pod } from "@kubernetes/client-node";
import { LABELS } from "../k8s/contract.ts";
import { labelSafe, poolKey } from "../k8s/resource.ts";
import { observePod } from "../k8s/status.ts";

export interface PoolTarget {
  profile: string;
  size: string;
  count: number;
  /** image the profile resolves to now; pool pods with another image are replaced */
  image: string;
}

export interface WarmPoolPlan {
  create: { target: PoolTarget; count: number }[];
  delete: { name: string; why: string }[];
}

export interface WarmPoolObservation {
  targets: PoolTarget[];
  /** unclaimed pool pods (label pool=warm) */
  pods: V1Pod[];
  now: Date;
  /** a pool pod older than this is replaced, so its activeDeadlineSeconds never bites a sandbox */
  maxAgeMs: number;
  /** caps API writes per round so a refill never floods the API server */
  maxCreatesPerRound: number;
}

export function planWarmPool(o: WarmPoolObservation): WarmPoolPlan {
  const byKey = new Map<string, PoolTarget>();
  for (const t of o.targets) byKey.set(poolKey(labelSafe(t.profile), labelSafe(t.size)), t);
  const groups = new Map<string, V1Pod[]>();
  const plan: WarmPoolPlan = { create: [], delete: [] };
  for (const pod of o.pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const key = poolKey(pod.metadata?.labels?.[LABELS.profile] ?? "", pod.metadata?.labels?.[LABELS.size] ?? "");
    const target = byKey.get(key);
    const name = pod.metadata!.name!;
    const created = pod.metadata?.creationTimestamp
      ? new Date(pod.metadata.creationTimestamp).getTime()
      : o.now.getTime();
    const observed = observePod(pod);
    if (!target || target.count === 0) plan.delete.push({ name, why: `no warm pool is configured for ${key}` });
    else if (observed.phase === "Failed" || observed.phase === "Succeeded")
      plan.delete.push({ name, why: `pool pod ended: ${observed.reason ?? observed.phase}` });
    else if (pod.spec?.containers?.[0]?.image !== target.image)
      plan.delete.push({ name, why: `profile ${target.profile} now uses image ${target.image}` });
    else if (o.now.getTime() - created >= o.maxAgeMs)
      plan.delete.push({ name, why: "pool pod reached its maximum age" });
    else groups.set(key, [...(groups.get(key) ?? []), pod]);
  }
  let budget = o.maxCreatesPerRound;
  for (const [key, target] of byKey) {
    const live = groups.get(key) ?? [];
    const diff = target.count - live.length;
    if (diff > 0 && budget > 0) {
      const n = Math.min(diff, budget);
      budget -= n;
      plan.create.push({ target, count: n });
    } else if (diff < 0) {
      // Shed starting pods first (nobody can claim them yet), then the youngest.
      const ranked = [...live].sort((a, b) => rank(a) - rank(b) || created(b) - created(a));
      for (const p of ranked.slice(0, -diff))
        plan.delete.push({ name: p.metadata!.name!, why: `pool ${key} is above its target of ${target.count}` });
    }
  }
  return plan;
}

function rank(p: V1Pod): number {
  return observePod(p).ready ? 1 : 0;
}

function created(p: V1Pod): number {
  return p.metadata?.creationTimestamp ? new Date(p.metadata.creationTimestamp).getTime() : 0;
}
