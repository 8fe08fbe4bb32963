// Teams and their quotas (docs/tenancy.md): the `tenancy` section of the runtime config, and its
// resolution into exact numbers. Pure and shared with the Pulumi package through schema.ts, so the
// stack's validation and the runtime's are the same code.
//
// An owner belongs to at most one team (members); every other owner falls into the default team,
// which is a team like any other when it is configured (its limits apply) and unlimited when not.
import { z } from "zod";
import { ValidationError } from "../core/errors.ts";
import { formatCpu, formatMemory, parseCpu, parseMemory } from "../core/quantity.ts";

const quantity = z.union([z.string(), z.number()]);
const COUNT_FIX = "a limit is a whole number >= 0 (0 refuses every create); leave the key out for no limit";
const count = z.number({ message: COUNT_FIX }).int({ message: COUNT_FIX }).min(0, { message: COUNT_FIX });
/** a team's name: it becomes a label value and a key in the shares Lease */
export const TEAM_NAME_RE = /^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$/;

export const teamLimitsInput = z
  .object({
    /** live sandboxes (not paused, not finished) */
    sandboxes: count.optional(),
    /** CPU requests of its live sandboxes, e.g. "20" or "500m" */
    cpu: quantity.optional(),
    /** memory requests of its live sandboxes, e.g. "64Gi" */
    memory: quantity.optional(),
    /** paused sandboxes (snapshots kept) */
    pausedSandboxes: count.optional(),
    /** bytes of its paused sandboxes' snapshots */
    pausedBytes: quantity.optional(),
    /** creates (and warm claims, resumes) per minute: a token bucket refilled at this rate */
    createsPerMinute: z
      .number({ message: COUNT_FIX })
      .int({ message: COUNT_FIX })
      .min(1, {
        message: "createsPerMinute is a whole number >= 1; leave it out for no rate limit",
      })
      .optional(),
    /** the bucket's size: creates that may arrive at once; default createsPerMinute */
    createsBurst: z.number().int().min(1, { message: "createsBurst is a whole number >= 1" }).optional(),
  })
  .strict();

export const teamInput = z
  .object({
    name: z.string().regex(TEAM_NAME_RE, {
      message: "use lower-case letters, digits, '-', '_' or '.', at most 63 characters",
    }),
    /** owners (token owners, JWT subjects) in this team */
    members: z.array(z.string().min(1)).default([]),
    limits: teamLimitsInput.default({}),
    /** a part of the global budget kept for this team: other teams never take it while it is unused */
    guarantee: z.object({ cpu: quantity, memory: quantity }).strict().optional(),
  })
  .strict();

export const tenancyInput = z
  .object({
    teams: z.array(teamInput).default([]),
    /** where owners of no team go; configure a team of this name to give it limits */
    defaultTeam: z
      .string()
      .regex(TEAM_NAME_RE, { message: "use a team name (lower-case, digits, '-', '_', '.')" })
      .default("default"),
    /** owners who see every team's usage (GET /v1/usage) */
    admins: z.array(z.string().min(1)).default([]),
  })
  .strict();

export const TENANCY_DEFAULTS = { teams: [], defaultTeam: "default", admins: [] };

/** The section as validated, before resolution: what stack config writes into config.json. */
export type TenancyInput = z.output<typeof tenancyInput>;

export interface TeamLimits {
  sandboxes?: number;
  cpuMillis?: number;
  memoryBytes?: number;
  pausedSandboxes?: number;
  pausedBytes?: number;
  createsPerMinute?: number;
  createsBurst?: number;
}

export interface TeamConfig {
  name: string;
  members: string[];
  limits: TeamLimits;
  guarantee?: { cpuMillis: number; memoryBytes: number };
}

export interface TenancyConfig {
  /** false when no team is configured: admission then works exactly as without tenancy */
  enabled: boolean;
  teams: Record<string, TeamConfig>;
  /** owner -> team, for every member */
  teamOf: Record<string, string>;
  defaultTeam: string;
  admins: string[];
}

/** The team an owner belongs to: its configured team, else the default team. */
export function teamOfOwner(t: TenancyConfig, owner: string): string {
  return Object.hasOwn(t.teamOf, owner) ? t.teamOf[owner] : t.defaultTeam;
}

/** Metadata keys under this prefix are the service's tenancy state: no caller sets or sees them. */
export const TENANCY_METADATA_PREFIX = "sbx.tenancy.";
/**
 * Stamped on a sandbox at create when the caller's token named a configured team (a JWT's team
 * claim, docs/identity.md): the team it counts against wherever it is counted, on every replica
 * and after restarts, without the token.
 */
export const TEAM_METADATA_KEY = `${TENANCY_METADATA_PREFIX}team`;

/** The team a sandbox counts against: the one stamped at its create, else its owner's. */
export function teamOfSandbox(t: TenancyConfig, s: { owner?: string; metadata?: Record<string, string> }): string {
  const stamped = s.metadata?.[TEAM_METADATA_KEY];
  return stamped !== undefined && Object.hasOwn(t.teams, stamped) ? stamped : teamOfOwner(t, s.owner ?? "");
}

/** A caller's team: the team its token named when that team is configured, else its owner's. */
export function teamOfCaller(t: TenancyConfig, owner: string, claimed: string | undefined): string {
  return claimed !== undefined && Object.hasOwn(t.teams, claimed) ? claimed : teamOfOwner(t, owner);
}

/**
 * Exact numbers from the parsed section, or a ValidationError naming the key: a quantity that
 * does not parse, an owner in two teams, two teams of one name, or guarantees that sum past the
 * budget (they could not all be kept). `field` prefixes keys ("config.tenancy" or the stack's).
 */
export function resolveTenancy(
  input: z.output<typeof tenancyInput>,
  budget: { cpuMillis: number; memoryBytes: number },
  field = "config.tenancy",
): TenancyConfig {
  const teams: Record<string, TeamConfig> = {};
  const teamOf: Record<string, string> = {};
  for (const [i, t] of input.teams.entries()) {
    const k = `${field}.teams[${i}]`;
    if (Object.hasOwn(teams, t.name))
      throw new ValidationError(`${k}.name`, t.name, "two teams have this name; merge them or rename one");
    for (const m of t.members) {
      if (Object.hasOwn(teamOf, m))
        throw new ValidationError(
          `${k}.members`,
          m,
          `this owner is already in team ${teamOf[m]}; an owner belongs to one team`,
        );
      teamOf[m] = t.name;
    }
    teams[t.name] = { name: t.name, members: t.members, limits: resolveLimits(t.limits, `${k}.limits`) };
    if (t.guarantee)
      teams[t.name].guarantee = {
        cpuMillis: parseCpu(`${k}.guarantee.cpu`, t.guarantee.cpu),
        memoryBytes: parseMemory(`${k}.guarantee.memory`, t.guarantee.memory),
      };
  }
  // "default" is the built-in team of everyone else; any other name must be a configured team,
  // or a typo would silently leave those owners unlimited
  if (input.defaultTeam !== TENANCY_DEFAULTS.defaultTeam && !Object.hasOwn(teams, input.defaultTeam))
    throw new ValidationError(
      `${field}.defaultTeam`,
      input.defaultTeam,
      `names no team; configure a team of this name (${Object.keys(teams).join(", ") || "none is"} configured) or leave defaultTeam out for the built-in "default"`,
    );
  validateGuarantees(Object.values(teams), budget, field);
  return { enabled: input.teams.length > 0, teams, teamOf, defaultTeam: input.defaultTeam, admins: input.admins };
}

function resolveLimits(l: z.output<typeof teamLimitsInput>, k: string): TeamLimits {
  const out: TeamLimits = {};
  if (l.sandboxes !== undefined) out.sandboxes = l.sandboxes;
  if (l.cpu !== undefined) out.cpuMillis = parseCpu(`${k}.cpu`, l.cpu);
  if (l.memory !== undefined) out.memoryBytes = parseMemory(`${k}.memory`, l.memory);
  if (l.pausedSandboxes !== undefined) out.pausedSandboxes = l.pausedSandboxes;
  if (l.pausedBytes !== undefined) out.pausedBytes = parseMemory(`${k}.pausedBytes`, l.pausedBytes);
  if (l.createsPerMinute !== undefined) out.createsPerMinute = l.createsPerMinute;
  if (l.createsBurst !== undefined) {
    if (l.createsPerMinute === undefined)
      throw new ValidationError(`${k}.createsBurst`, l.createsBurst, "set createsPerMinute too, or leave both out");
    out.createsBurst = l.createsBurst;
  }
  return out;
}

/** Guarantees are carved out of the budget, so together they must fit in it. */
export function validateGuarantees(
  teams: readonly TeamConfig[],
  budget: { cpuMillis: number; memoryBytes: number },
  field: string,
): void {
  const cpu = teams.reduce((s, t) => s + (t.guarantee?.cpuMillis ?? 0), 0);
  const mem = teams.reduce((s, t) => s + (t.guarantee?.memoryBytes ?? 0), 0);
  const who = teams.filter((t) => t.guarantee).map((t) => t.name);
  if (cpu > budget.cpuMillis)
    throw new ValidationError(
      `${field}.teams[*].guarantee.cpu`,
      formatCpu(cpu),
      `the guarantees of ${who.join(", ")} sum past the budget's cpu ${formatCpu(budget.cpuMillis)}; lower them or raise the budget`,
    );
  if (mem > budget.memoryBytes)
    throw new ValidationError(
      `${field}.teams[*].guarantee.memory`,
      formatMemory(mem),
      `the guarantees of ${who.join(", ")} sum past the budget's memory ${formatMemory(budget.memoryBytes)}; lower them or raise the budget`,
    );
}
