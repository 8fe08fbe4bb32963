// Sizing cross-checks between the namespace budget and what the node groups can hold. Pure.
// They are warnings, not errors: a budget above node capacity is a legitimate ceiling (the
// autoscaler may grow the groups), but the operator should see the mismatch at preview.
import { parseCpu, parseMemory } from "../../runtime/core/quantity.ts";
import { resolveInstanceLimits } from "../cluster/maxPods.ts";
import { planNodeGroups, sandboxCapacity } from "../cluster/plan.ts";
import type { PlatformConfig } from "../shared/platformConfig.ts";
import { planQuota } from "../tenancy/plan.ts";

export function planSizingWarnings(cfg: PlatformConfig): string[] {
  const warnings: string[] = [];
  const quota = planQuota(cfg);
  const warm = cfg.warmPool.reduce((n, p) => n + p.count, 0);
  if (warm > quota.pods)
    warnings.push(
      `sbx:warmPool holds ${warm} pods but the quota allows ${quota.pods}; raise sbx:budget or shrink the pool`,
    );
  const warmCpu = cfg.warmPool.reduce(
    (n, p) => n + p.count * parseCpu("cpuRequest", cfg.sizeClasses[p.size].cpuRequest),
    0,
  );
  const warmMem = cfg.warmPool.reduce(
    (n, p) => n + p.count * parseMemory("memoryRequest", cfg.sizeClasses[p.size].memoryRequest),
    0,
  );
  if (warmCpu > quota.requestsCpuMillis || warmMem > quota.requestsMemoryBytes) {
    warnings.push("sbx:warmPool requests more CPU or memory than sbx:budget; the pool can never fill");
  }
  if (cfg.mode !== "eks") return warnings;
  const groups = planNodeGroups(cfg);
  const cap = sandboxCapacity(
    groups,
    (t) =>
      resolveInstanceLimits(
        "instanceType",
        t,
        [cfg.nodeGroups.system, ...cfg.nodeGroups.sandbox].find((g) => g.instanceType === t)?.networkLimits,
      ).vcpus,
  );
  if (quota.requestsCpuMillis > cap.vcpus * 1000) {
    warnings.push(
      `sbx:budget.cpu (${cfg.budget.cpu}) exceeds the sandbox node groups' ${cap.vcpus} vCPUs at maxSize; admitted sandboxes beyond that stay Pending until nodes are added`,
    );
  }
  if (quota.pods > cap.pods) {
    warnings.push(
      `quota allows ${quota.pods} pods but sandbox nodes hold at most ${cap.pods} (max pods × maxSize); raise maxSize or enable prefix delegation`,
    );
  }
  return warnings;
}
