// Platform factory and the runtime's assembly: the platform named by config.platform
// (runtime/platform.ts), loaded with a dynamic import so a platform whose module is missing fails
// only when chosen, plus the Manager built on its fields. Used by the service (runtime/main.ts)
// and the CLI's direct mode.
import { planRole, type Role } from "./config/role.ts";
import type { RuntimeConfig } from "./config/schema.ts";
import { Admission, admissionOptionsFor } from "./core/admission.ts";
import { createAuditStore } from "./core/audit.ts";
import { ImageCatalog, type ImageLookup } from "./core/catalog.ts";
import type { Clock } from "./core/clock.ts";
import { ValidationError } from "./core/errors.ts";
import type { Logger } from "./core/log.ts";
import type { MaintenanceTask } from "./core/maintenance.ts";
import { SandboxManager } from "./core/manager.ts";
import type { Backend, SandboxView } from "./core/types.ts";
import type { Platform } from "./platform.ts";
import type { SnapshotGc } from "./snapshot/gc.ts";
import type { PauseResume } from "./snapshot/service.ts";

export interface BackendDeps {
  logger: Logger;
  clock: Clock;
  /** the Manager's catalog, so the backend's warm pool reads the same one (buildManager sets it) */
  catalog?: ImageLookup;
  /** the process role (runtime/config/role.ts): which half of the work this process does. Default all */
  role?: Role;
  /** this replica's name (POD_NAME in a Deployment): the Lease holder. Default: a random one */
  identity?: string;
}

type Factory = (config: RuntimeConfig, deps: BackendDeps) => Platform;

// Literal import() calls, not a variable path: the Pulumi package bundles runtime/main.ts with
// esbuild, which can only follow imports it can read; a backend still loads only when chosen.
const MODULES: Record<
  RuntimeConfig["platform"],
  { file: string; export: string; load: () => Promise<Record<string, unknown>> }
> = {
  local: {
    file: "runtime/local/platform.ts",
    export: "createLocalPlatform",
    load: () => import("./local/platform.ts"),
  },
  kubernetes: {
    file: "runtime/kubernetes.ts",
    export: "createKubernetesPlatform",
    load: () => import("./kubernetes.ts"),
  },
};

export async function createPlatform(config: RuntimeConfig, deps: BackendDeps): Promise<Platform> {
  const m = Object.hasOwn(MODULES, config.platform) ? MODULES[config.platform] : undefined;
  if (!m)
    throw new ValidationError("config.platform", config.platform, `use one of: ${Object.keys(MODULES).join(", ")}`);
  let mod: Record<string, unknown>;
  try {
    mod = await m.load();
  } catch (err) {
    throw new Error(`the ${config.platform} platform (${m.file}) could not be loaded: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const factory = mod[m.export];
  if (typeof factory !== "function") throw new Error(`${m.file} does not export ${m.export}(config, deps)`);
  return (factory as Factory)(config, deps);
}

export interface RuntimeParts {
  platform: Platform;
  /** platform.backend */
  backend: Backend;
  manager: SandboxManager;
  catalog: ImageCatalog;
  /** present when pause/resume is configured */
  pauseResume?: PauseResume;
}

/**
 * With config.snapshots (or a service the caller built), the pause/resume service the Manager
 * owns (runtime/snapshot), and its periodic jobs. Loaded only when configured.
 */
async function pauseResumeFor(
  platform: Platform,
  config: RuntimeConfig,
  deps: BackendDeps & { snapshotGc?: SnapshotGc },
  catalog: ImageCatalog,
  given?: PauseResume,
): Promise<{ pauseResume?: PauseResume; maintenance: MaintenanceTask[] }> {
  let pauseResume = given;
  const pause = platform.pause;
  if (!pauseResume && config.snapshots && pause) {
    const [{ createPauseResume }, { registryLoginFor }] = await Promise.all([
      import("./snapshot/wire.ts"),
      import("./snapshot/registryLogin.ts"),
    ]);
    const auth = registryLoginFor(config.snapshots, { clock: deps.clock });
    pauseResume = createPauseResume(
      { backend: platform.backend, pause },
      {
        config,
        clock: deps.clock,
        logger: deps.logger,
        auth,
        imageFor: (p) => catalog.resolve(p).image,
        gc: deps.snapshotGc,
      },
    );
  }
  if (!pauseResume) return { maintenance: [] };
  const pr = pauseResume;
  return {
    pauseResume: pr,
    maintenance: [
      { name: "snapshots.expire", everyMs: 60 * 60_000, run: () => pr.expire() },
      // settles what a crashed process left mid-pause or mid-resume without waiting for a
      // restart (with several replicas, the one that crashed may never come back)
      { name: "snapshots.recover", everyMs: 60_000, run: () => pr.recover() },
    ],
  };
}

/**
 * Automatic pause/wake (runtime/autopause) for sandboxes created with an autoPause policy. Probes
 * run on the raw backend (a probe never wakes a paused sandbox nor counts as activity); actions
 * go through the Manager as the sandbox's owner, so admission and audit apply to them too.
 */
async function autoPauseTask(
  platform: Platform,
  view: SandboxView,
  deps: BackendDeps,
  manager: () => SandboxManager,
): Promise<MaintenanceTask> {
  const [{ AutoPauseController }, { StoredPolicies }] = await Promise.all([
    import("./autopause/controller.ts"),
    import("./autopause/stored.ts"),
  ]);
  const stored = new StoredPolicies(deps.logger);
  const ownerOf = async (id: string) => (await view.describe(id))?.owner ?? "";
  const leads = leadership(platform);
  const controller = new AutoPauseController({
    // the wake schedule of a paused sandbox must survive a restart: the platform says where
    store: platform.autoPauseStatus,
    clock: deps.clock,
    logger: deps.logger,
    probeBackend: platform.backend,
    targets: async () => stored.of(await view.list()),
    pause: async (id) => manager().pause(await ownerOf(id), id),
    resume: async (id) => manager().resume(await ownerOf(id), id),
    kill: async (id) => manager().kill(await ownerOf(id), id),
  });
  // with several replicas only the leader probes and acts, so a sandbox is paused once
  return {
    name: "autopause",
    everyMs: 1000,
    run: async () => (leads() ? controller.tick() : undefined),
  };
}

/** Whether this replica leads: a platform without replicas has only this one. */
function leadership(platform: Platform): () => boolean {
  const replicas = platform.replicas;
  return replicas ? () => replicas.leads() : () => true;
}

function reapGate(role: Role, platform: Platform): () => boolean {
  if (!planRole(role).reaps) return () => false;
  if (role === "controller") return leadership(platform);
  return () => true; // all: as before the split, every replica reaps (deletes are idempotent)
}

/** Backend + catalog + audit + admission + manager, not yet started. */
export async function buildManager(
  config: RuntimeConfig,
  deps: BackendDeps & {
    /** the platform to build on; default: the one config.platform names */
    platform?: Platform;
    pauseResume?: PauseResume;
    snapshotGc?: SnapshotGc;
    processMetrics?: boolean;
    reaperIntervalMs?: number;
  },
): Promise<RuntimeParts> {
  const catalog = new ImageCatalog({ inline: config.catalog, path: config.catalogPath, logger: deps.logger });
  const platform = deps.platform ?? (await createPlatform(config, { ...deps, catalog }));
  const { backend } = platform;
  const { pauseResume, maintenance } = await pauseResumeFor(platform, config, deps, catalog, deps.pauseResume);
  let manager: SandboxManager | undefined;
  if (pauseResume) maintenance.push(await autoPauseTask(platform, pauseResume, deps, () => manager!));
  manager = new SandboxManager({
    backend,
    pauseResume,
    config,
    catalog,
    audit: createAuditStore(config.audit, deps.logger),
    clock: deps.clock,
    logger: deps.logger,
    // several manager replicas share one budget through the backend (runtime/k8s/budget)
    admission: new Admission(
      config.budget,
      admissionOptionsFor(config, {
        scope: platform.replicas?.budgetScope,
        nowMs: () => deps.clock.now().getTime(),
      }),
    ),
    processMetrics: deps.processMetrics,
    reaperIntervalMs: deps.reaperIntervalMs,
    maintenance,
    // a manager-role process reconciles the budget but deletes nothing (the controller reaps);
    // a controller deletes only while it leads, so two replicas do not reap the same sandbox
    shouldReap: reapGate(deps.role ?? "all", platform),
  });
  return { platform, backend, manager, catalog, pauseResume };
}
