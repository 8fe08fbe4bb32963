// Builds this replica's budget share from the Kubernetes parts when config asks for it: the
// ledger on the shares Lease, the admission scope that reads it, and the annotation every record
// this replica accepts carries, so the others (and this replica after a restart) know whose
// share it counts against. Only processes that admit (roles all and manager) hold a share.
import { type AdmissionScope, holdsCapacity } from "../../core/admission.ts";
import type { KubernetesParts } from "../parts.ts";
import { ShareLedger } from "./ledger.ts";
import { planHeadroom, type ShareVec } from "./sharePlan.ts";
import { ADMITTED_BY_ANNOTATION, sharesLeaseName } from "./sharesDoc.ts";

export interface BudgetShares {
  readonly ledger: ShareLedger;
  readonly scope: AdmissionScope;
  /** annotations for a record this replica accepts */
  readonly annotations: Record<string, string>;
}

/** onReplicas: the live replicas of every shares document read (the warm claims' partition, runtime/k8s/claims) */
export function createBudgetShares(
  p: KubernetesParts,
  onReplicas?: (live: string[], atMs: number) => void,
): BudgetShares | undefined {
  const s = p.config.kubernetes.budgetShares;
  if (!s.enabled || p.role === "controller") return undefined;
  const { index, identity, config } = p;
  const admittedBy = (id: string) => index.resource(id)?.metadata.annotations?.[ADMITTED_BY_ANNOTATION];
  const ledger = new ShareLedger({
    api: p.clients.shares, // a connection pool of its own: renewals never queue behind the replica's other requests
    namespace: config.kubernetes.runtimeNamespace,
    leaseName: sharesLeaseName(config.kubernetes.leaseName),
    identity,
    budget: config.budget,
    headroom: (n) => planHeadroom(config.budget, n, s.headroomFraction),
    orphans: (replicas): ShareVec => {
      const sum = { cpuMillis: 0, memoryBytes: 0 };
      for (const sb of index.sandboxes()) {
        if (!holdsCapacity(sb.phase)) continue;
        const by = admittedBy(sb.id);
        if (by !== undefined && replicas.has(by)) continue;
        sum.cpuMillis += sb.cpuRequestMillis;
        sum.memoryBytes += sb.memoryRequestBytes;
      }
      return sum;
    },
    clock: p.clock,
    logger: p.logger.child({ op: "budget-shares" }),
    leaseMs: s.leaseSeconds * 1000,
    tickMs: s.tickMs,
    onReplicas,
  });
  return {
    ledger,
    scope: {
      limit: () => ledger.limit(),
      counts: (id) => admittedBy(id) === identity,
      attach: (used) => ledger.bindUsed(used),
      fenced: () => ledger.fenced(),
      awaitRenewal: () => ledger.awaitRenewal(),
      stats: () => {
        const x = ledger.snapshot();
        return {
          moves: x.moves,
          replicas: x.replicas,
          fenced: x.fenced,
          conflicts: x.conflicts,
          abandoned: x.abandoned,
          renewedAgoMs: x.renewedAgoMs,
        };
      },
    },
    annotations: { [ADMITTED_BY_ANNOTATION]: identity },
  };
}
