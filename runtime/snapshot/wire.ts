// Assembly of the pause/resume service for a platform that offers pause support (runtime/platform.ts
// PauseSupport: compute release, specs, records, layer paths, registry address): the Snapshotter
// (registry, record store, steps) under the PauseResume service the Manager owns.
import { join } from "node:path";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import { ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Backend, Sandbox, SandboxSpec } from "../core/types.ts";
import type { PauseSupport } from "../platform.ts";
import type { RegistryAuth } from "./auth.ts";
import { CollectingOciClient, type SnapshotGc } from "./gc.ts";
import { OciClient } from "./oci.ts";
import { FileRecordStore, type SnapshotRecordStore } from "./record.ts";
import { PauseResume } from "./service.ts";
import { Snapshotter, type SnapshotterOptions } from "./snapshotter.ts";

export interface SnapshotWiring {
  /** reclaims registry storage after deletes (the embedded docker-registry; ECR does it itself) */
  gc?: SnapshotGc;
  config: RuntimeConfig;
  clock: Clock;
  logger: Logger;
  auth?: RegistryAuth;
  /** default: files under <local.stateDir>/snapshot-records */
  store?: SnapshotRecordStore;
  /** image of a profile when the backend cannot say (default: config.catalog) */
  imageFor?(profile: string): string;
  writablePaths?: string[];
  autoResumeDefault?: boolean;
  onStep?: SnapshotterOptions["onStep"];
  /** this process's name, for stores shared by several replicas (default: the platform's, if any) */
  holder?: string;
  /** override of the in-flight grace for shared stores (tests of replica takeover) */
  inFlightGraceMs?: number;
}

/** How long another replica's in-flight pause or resume is left alone before it counts as abandoned. */
const SHARED_STORE_IN_FLIGHT_GRACE_MS = 10 * 60_000;

/** The pause/resume service over a platform's backend and its pause support. */
export function createPauseResume(platform: { backend: Backend; pause: PauseSupport }, w: SnapshotWiring): PauseResume {
  const snap = w.config.snapshots;
  if (!snap)
    throw new ValidationError(
      "config.snapshots",
      undefined,
      "set snapshots.registry (e.g. http://127.0.0.1:5000 or <account>.dkr.ecr.<region>.amazonaws.com) to enable pause and resume",
    );
  const { backend, pause } = platform;
  const shared = !w.store && !!pause.records;
  // with a collector, every manifest delete schedules a garbage collection of the registry
  const target = {
    registry: snap.registry,
    auth: w.auth,
    ...(pause.registryAddress ? { address: () => pause.registryAddress!() } : {}),
  };
  const oci = w.gc ? new CollectingOciClient(target, w.gc) : new OciClient(target);
  const holder = w.holder ?? pause.records?.holder;
  const snapshotter = new Snapshotter({
    backend,
    compute: pause.compute,
    oci,
    repository: snap.repository,
    store:
      w.store ??
      pause.records?.store ??
      new FileRecordStore(join(w.config.local.stateDir, "snapshot-records"), { soleWriter: true }),
    ...(holder ? { holder } : {}),
    ...(shared ? { inFlightGraceMs: w.inFlightGraceMs ?? SHARED_STORE_IN_FLIGHT_GRACE_MS } : {}),
    clock: w.clock,
    logger: w.logger,
    retentionDays: snap.retentionDays,
    writablePaths: w.writablePaths,
    autoResumeDefault: w.autoResumeDefault,
    onStep: w.onStep,
    gc: w.gc,
    direct: pause.directLayers,
    specFor: async (s) => (await pause.specOf(s.id)) ?? specFromSandbox(s, w),
  });
  return new PauseResume({ backend, snapshotter, logger: w.logger });
}

/**
 * The spec to start a paused sandbox's compute again. Sandbox carries everything but env;
 * used only when the platform's specOf no longer knows the sandbox: env is then empty (docs/pause-resume.md).
 */
export function specFromSandbox(s: Sandbox, w: Pick<SnapshotWiring, "config" | "imageFor">): SandboxSpec {
  const size = w.config.sizeClasses[s.size];
  if (!size)
    throw new ValidationError(
      `sandbox ${s.id} size`,
      s.size,
      `the size class is no longer configured; add it back to config.sizeClasses to pause this sandbox`,
    );
  const image = w.imageFor?.(s.profile) ?? w.config.catalog[s.profile];
  if (!image)
    throw new ValidationError(
      `sandbox ${s.id} profile`,
      s.profile,
      "the profile is no longer in the catalog; add it back to pause this sandbox",
    );
  const createdAt = new Date(s.createdAt);
  return {
    id: s.id,
    owner: s.owner,
    image: { profile: s.profile, image },
    size,
    env: {},
    ttlSeconds: Math.max(1, Math.round((Date.parse(s.expiresAt) - createdAt.getTime()) / 1000)),
    idleTimeoutSeconds: s.idleTimeoutSeconds ?? w.config.defaults.idleTimeoutSeconds,
    clientKey: s.clientKey,
    metadata: { ...s.metadata },
    createdAt,
  };
}
