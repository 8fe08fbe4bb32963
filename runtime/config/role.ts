// Which half of the runtime this process is: the Deployments run `manager` (the HTTP API) and
// `controller` (the leader-elected loops) as separate pods; `all` runs both in one process, the
// default for `npm start`, the local platform and the tests. Pure: argv and env are passed in.
import { ValidationError } from "../core/errors.ts";

export const ROLES = ["all", "manager", "controller"] as const;
export type Role = (typeof ROLES)[number];

export interface ResolvedRole {
  role: Role;
  /** where it came from, for the start-up log */
  source: "argv" | "SBX_ROLE" | "default";
  /** set when argv and SBX_ROLE disagree: argv won, and the log says so */
  overridden?: string;
}

function parseRole(field: string, value: string): Role {
  if ((ROLES as readonly string[]).includes(value)) return value as Role;
  throw new ValidationError(field, value, `use one of: ${ROLES.join(", ")} (or leave it unset for all)`);
}

/**
 * The role from the first argument (`node runtime.mjs controller`) or SBX_ROLE. When both are
 * set and differ, the argument wins: it is the container's command line, written for this one
 * process and visible in `ps` and the pod spec, while SBX_ROLE may be inherited from a shell
 * or an env file meant for another process. A bad value in either is an error, even the one
 * that loses: a typo must not hide behind the other setting.
 */
export function resolveRole(argv: readonly string[], env: NodeJS.ProcessEnv): ResolvedRole {
  if (argv.length > 1)
    throw new ValidationError("argv", argv.join(" "), `pass at most one argument, the role: ${ROLES.join(", ")}`);
  const fromArgv = argv[0] === undefined ? undefined : parseRole("role argument", argv[0]);
  const fromEnv = env.SBX_ROLE === undefined || env.SBX_ROLE === "" ? undefined : parseRole("SBX_ROLE", env.SBX_ROLE);
  if (fromArgv)
    return fromEnv && fromEnv !== fromArgv
      ? { role: fromArgv, source: "argv", overridden: `SBX_ROLE=${fromEnv}` }
      : { role: fromArgv, source: "argv" };
  if (fromEnv) return { role: fromEnv, source: "SBX_ROLE" };
  return { role: "all", source: "default" };
}

/** What a process of each role runs. */
export interface RolePlan {
  /** the sandbox API routes (/v1/..., /openapi.json); health, readiness and metrics are always served */
  api: boolean;
  /** campaigns for the controller Lease; as leader: reconcile, warm-pool refill, orphan sweep, auto pause/wake */
  leaderElection: boolean;
  /** deletes expired, idle and finished sandboxes (the budget reconcile runs in every role) */
  reaps: boolean;
  /** periodic jobs: snapshot expiry, pause/resume recovery, auto pause/wake ticks; and recovery at start */
  maintenance: boolean;
  /** reconciles the sandboxes this process created or resumed, without the Lease, so they get pods with no controller */
  reconcilesOwn: boolean;
}

export function planRole(role: Role): RolePlan {
  switch (role) {
    case "all":
      return { api: true, leaderElection: true, reaps: true, maintenance: true, reconcilesOwn: false };
    case "manager":
      return { api: true, leaderElection: false, reaps: false, maintenance: false, reconcilesOwn: true };
    case "controller":
      return { api: false, leaderElection: true, reaps: true, maintenance: true, reconcilesOwn: false };
  }
}

/** One line for the start-up log: what this process runs. */
export function describeRole(role: Role): string {
  switch (role) {
    case "all":
      return "HTTP API and controller in one process (reconcile, warm pool, reaper, auto pause/wake, recovery while leading)";
    case "manager":
      return "HTTP API only: no Lease, no warm-pool refill, no reaper; reconciles the sandboxes it creates or resumes";
    case "controller":
      return "controller only (Lease; while leading: reconcile, warm pool, reaper, auto pause/wake; recovery): serves /healthz, /readyz, /metrics";
  }
}

/** Roles other than all split the work between processes that share the cluster; locally there is one. */
export function validateRoleForPlatform(role: Role, platform: string): void {
  if (role === "all" || platform === "kubernetes") return;
  throw new ValidationError(
    "role",
    role,
    `the ${platform} platform runs in one process: use role all (unset SBX_ROLE and pass no argument), or set platform kubernetes in SBX_CONFIG`,
  );
}
