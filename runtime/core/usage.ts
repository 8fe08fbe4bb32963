// What GET /v1/usage and `sbx usage` show (docs/tenancy.md): per team, its live sandboxes, CPU
// and memory against its limits, its paused sandboxes, and its creates rate. A caller sees its
// own team; an owner listed in tenancy.admins sees every team. Pure: it reads Admission's counts
// and the last listing the Manager already holds, so a request costs no call to the substrate.
import type { TeamLimits, TenancyConfig } from "../config/tenancy.ts";
import { teamOfCaller, teamOfSandbox } from "../config/tenancy.ts";
import type { AdmissionUsage } from "./admission.ts";
import type { Sandbox } from "./types.ts";

export interface TeamUsageReport {
  team: string;
  /** live sandboxes and their requests, across replicas as far as this one knows */
  live: { sandboxes: number; cpuMillis: number; memoryBytes: number };
  /** paused sandboxes (from the last listing, a few seconds old at most) */
  paused: { sandboxes: number };
  /** hard limits; a missing key has no limit */
  limits: TeamLimits;
  guarantee?: { cpuMillis: number; memoryBytes: number };
  /** creates per minute: the limit, and the tokens this replica's bucket holds now */
  creates?: { perMinute: number; burst: number; tokensHere?: number };
  /** creates this replica refused the team since it started, by reason */
  rejectedHere: Record<string, number>;
}

export interface UsageReport {
  /** the caller's team */
  team: string;
  /** true when the caller sees every team (tenancy.admins) */
  admin: boolean;
  teams: TeamUsageReport[];
}

export function reportUsage(
  owner: string,
  tenancy: TenancyConfig | undefined,
  admission: AdmissionUsage,
  listed: readonly Sandbox[],
  /** the team the caller's token named (a JWT's claim) */
  claimedTeam?: string,
): UsageReport {
  const team = tenancy ? teamOfCaller(tenancy, owner, claimedTeam) : "default";
  const admin = !!tenancy?.admins.includes(owner);
  const paused = new Map<string, number>();
  for (const s of listed) {
    if (s.phase !== "Paused") continue;
    const t = tenancy ? teamOfSandbox(tenancy, s) : "default";
    paused.set(t, (paused.get(t) ?? 0) + 1);
  }
  if (!admission.teams) {
    // no teams configured: everyone is in one default team, and its use is the budget's
    const live = { sandboxes: admission.reservations, ...admission.used };
    return {
      team,
      admin,
      teams: [{ team, live, paused: { sandboxes: paused.get(team) ?? 0 }, limits: {}, rejectedHere: {} }],
    };
  }
  const teams = admission.teams
    .filter((t) => admin || t.team === team)
    .map((t): TeamUsageReport => {
      const l = t.limits;
      return {
        team: t.team,
        live: t.usedEverywhere,
        paused: { sandboxes: paused.get(t.team) ?? 0 },
        limits: l,
        ...(t.guarantee ? { guarantee: t.guarantee } : {}),
        ...(l.createsPerMinute
          ? {
              creates: {
                perMinute: l.createsPerMinute,
                burst: l.createsBurst ?? l.createsPerMinute,
                ...(t.tokens !== undefined ? { tokensHere: t.tokens } : {}),
              },
            }
          : {}),
        rejectedHere: t.rejected,
      };
    });
  return { team, admin, teams };
}
