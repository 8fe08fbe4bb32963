// What a platform gives the rest of the runtime, declared in one place: its Backend (what the
// Manager calls for every sandbox), what pause/resume needs from it, what several replicas
// sharing it need, and how to stop it. createLocalPlatform (runtime/local/platform.ts) and
// createKubernetesPlatform (runtime/kubernetes.ts) return it; the composition root
// (runtime/backends.ts) and the pause/resume wiring (runtime/snapshot/wire.ts) read its fields,
// so the type checker sees the whole contract and nothing is found by a cast.
import type { AutoPauseStatusStore } from "./autopause/controller.ts";
import type { AdmissionScope } from "./core/admission.ts";
import type { Backend, ComputeRelease, SandboxSpec } from "./core/types.ts";
import type { DirectLayers } from "./snapshot/layers.ts";
import type { SnapshotRecordStore } from "./snapshot/record.ts";

export interface Platform {
  readonly backend: Backend;
  /** present when the platform can give compute back without losing the sandbox (pause/resume) */
  readonly pause?: PauseSupport;
  /**
   * Where automatic pause/wake keeps a paused sandbox's wake schedule, so it survives a restart:
   * with the sandboxes when they are shared by replicas (Kubernetes), else files under the state dir.
   */
  readonly autoPauseStatus: AutoPauseStatusStore;
  /** present when several runtime replicas share this platform's sandboxes (Kubernetes) */
  readonly replicas?: ReplicaSupport;
  /** Stops everything the platform started, the backend included. */
  close(): Promise<void>;
}

/**
 * What pause/resume (runtime/snapshot, docs/pause-resume.md "Backend duties") asks of a platform.
 * `compute` and `specOf` come together: a platform that can release compute must also say how
 * each sandbox was created, or its env is lost on resume.
 */
export interface PauseSupport {
  readonly compute: ComputeRelease;
  /** the spec the sandbox was created with, env included: a resume starts it again from this */
  specOf(id: string): Promise<SandboxSpec | undefined>;
  /**
   * Pause records kept with the sandboxes and shared by every replica (Kubernetes: the Sandbox
   * object), with this replica's name as their holder. Absent: files under local.stateDir, one writer.
   */
  readonly records?: SharedRecords;
  /** its sandboxes push and pull their own snapshot layers when they can */
  readonly directLayers?: DirectLayers;
  /** where snapshots.registry is right now, when that is not its name (an in-cluster Service's pod) */
  registryAddress?(): string;
}

export interface SharedRecords {
  readonly store: SnapshotRecordStore;
  /** this process's name, written into every record it touches (SnapshotterOptions.holder) */
  readonly holder: string;
}

/** What runtime replicas sharing one platform need to divide the work between them. */
export interface ReplicaSupport {
  /** this replica's share of a budget shared by several replicas; absent when budget shares are off */
  readonly budgetScope?: AdmissionScope;
  /** true in the replica that leads: it alone reaps (controller role) and runs automatic pause/wake */
  leads(): boolean;
}
