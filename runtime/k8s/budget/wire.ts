// Builds this replica's budget share from the Kubernetes parts when config asks for it: the
// ledger on the shares Lease, the admission scope that reads it, and the annotation every record
// this replica accepts carries, so the others (and this replica after a restart) know whose
// share it counts against. Only processes that admit (roles all and manager) hold a share.

import { teamOfSandbox } from "../../config/tenancy.ts";
import { type AdmissionScope, holdsCapacity } from "../../core/admission.ts";
import { type TeamScope, teamDim, teamLimitDims, teamLimitsFromDims } from "../../core/admissionTeams.ts";
import type { TeamUse } from "../../core/decideTeamAdmission.ts";
import type { Sandbox } from "../../core/types.ts";
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

// Over 60 lines on purpose: the budget and the team dimensions share one Lease document and
// one write path; splitting the closure would split that single writer.
/** onReplicas: the live replicas of every shares document read (the warm claims' partition, runtime/k8s/claims) */
export function createBudgetShares(
  p: KubernetesParts,
  onReplicas?: (live: string[], atMs: number) => void,
): BudgetShares | undefined {
  const s = p.config.kubernetes.budgetShares;
  if (!s.enabled || p.role === "controller") return undefined;
  const { index, identity, config } = p;
  const admittedBy = (id: string) => index.resource(id)?.metadata.annotations?.[ADMITTED_BY_ANNOTATION];
  // with teams, each team limit is one more dimension of the shared budget (sharePlan.ts)
  const tenancy = config.tenancy?.enabled ? config.tenancy : undefined;
  const dims = tenancy ? teamLimitDims(tenancy) : {};
  const budget: ShareVec = Object.keys(dims).length > 0 ? { ...config.budget, dims } : config.budget;
  const ledger = new ShareLedger({
    api: p.clients.shares, // a connection pool of its own: renewals never queue behind the replica's other requests
    namespace: config.kubernetes.runtimeNamespace,
    leaseName: sharesLeaseName(config.kubernetes.leaseName),
    identity,
    budget,
    headroom: (n) => planHeadroom(budget, n, s.headroomFraction),
    orphans: (replicas): ShareVec => {
      const sum: ShareVec = { cpuMillis: 0, memoryBytes: 0, ...(budget.dims ? { dims: {} } : {}) };
      for (const sb of index.sandboxes()) {
        if (!holdsCapacity(sb.phase)) continue;
        const by = admittedBy(sb.id);
        if (by !== undefined && replicas.has(by)) continue;
        sum.cpuMillis += sb.cpuRequestMillis;
        sum.memoryBytes += sb.memoryRequestBytes;
        if (sum.dims && tenancy) addTeamDims(sum.dims, teamOfSandbox(tenancy, sb), sb);
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
      attach: (used, kept) => ledger.bindUsed(used, kept),
      fenced: () => ledger.fenced(),
      awaitRenewal: () => ledger.awaitRenewal(),
      ...(tenancy
        ? {
            teams: teamScope(
              tenancy,
              ledger,
              () => index.sandboxes(),
              (id) => admittedBy(id) === identity,
            ),
          }
        : {}),
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

function addTeamDims(dims: Record<string, number>, team: string, sb: Sandbox): void {
  const add = (k: string, n: number) => (dims[k] = (dims[k] ?? 0) + n);
  add(teamDim(team, "sandboxes"), 1);
  add(teamDim(team, "cpu"), sb.cpuRequestMillis);
  add(teamDim(team, "memory"), sb.memoryRequestBytes);
}

/** How long what the other replicas hold per team is reused: a listing per admit would cost O(sandboxes). */
const ELSEWHERE_TTL_MS = 200;

/**
 * The teams' side of the share: this replica's part of each team's limits (its share's
 * dimensions), and what the other replicas (and dead replicas' sandboxes) hold per team, from
 * the index. Records another replica accepted but the index has not seen yet are missing, so
 * the reserve for unused guarantees is, if anything, too large: the other teams lose a little.
 */
function teamScope(
  tenancy: NonNullable<KubernetesParts["config"]["tenancy"]>,
  ledger: ShareLedger,
  sandboxes: () => Iterable<Sandbox>,
  mine: (id: string) => boolean,
): TeamScope {
  let cached: { at: number; used: Map<string, TeamUse> } | undefined;
  return {
    teamLimits: (team) => teamLimitsFromDims(tenancy, team, ledger.limit().dims),
    replicas: () => ledger.replicas(),
    available: () => ledger.available(),
    elsewhere: () => {
      const now = performance.now();
      if (cached && now - cached.at < ELSEWHERE_TTL_MS) return cached.used;
      const used = new Map<string, TeamUse>();
      for (const sb of sandboxes()) {
        if (!holdsCapacity(sb.phase) || mine(sb.id)) continue;
        const team = teamOfSandbox(tenancy, sb);
        const u = used.get(team) ?? { sandboxes: 0, cpuMillis: 0, memoryBytes: 0 };
        u.sandboxes += 1;
        u.cpuMillis += sb.cpuRequestMillis;
        u.memoryBytes += sb.memoryRequestBytes;
        used.set(team, u);
      }
      cached = { at: now, used };
      return used;
    },
  };
}
