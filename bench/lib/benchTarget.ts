// What the pause/resume benchmarks drive, as types: the target's arguments and the opened
// target. Apart from target.ts so that its Kubernetes half (kubernetesTarget.ts, loaded
// lazily) does not import target.ts back.
import type { Manager } from "../../runtime/core/types.ts";

export interface TargetArgs {
  /** in-process backend; "kubernetes" is implied by kubeconfig */
  platform?: "local" | "kubernetes";
  /** Kubernetes: a real cluster's kubeconfig (else the test control plane) */
  kubeconfig?: string;
  /** Kubernetes: sandbox namespace (required with kubeconfig) and the lease's namespace (default: the same) */
  namespace?: string;
  runtimeNamespace?: string;
  /** Kubernetes: image of the benchmark's profile (required with kubeconfig) */
  image?: string;
  runtimeClass?: string;
  /** Kubernetes: the pods push and pull their own snapshot layers (snapshots.podRegistry = the registry) */
  podLayers?: boolean;
  /** Kubernetes test cluster: snapshots into the boot's token registry, a token per sandbox (snapshots.tokenAuth) */
  registryTokens?: boolean;
  server?: string;
  token?: string;
  owner: string;
  /** snapshot registry (local target) / the same registry the server uses (raw throughput) */
  registry?: string;
  size: string;
  profile: string;
  warm: number;
  workspace?: string;
  tmp?: string;
  memoryLimit?: string;
  /** run the Manager's maintenance tasks (automatic pause among them); default off */
  maintenance?: boolean;
}

import type { RegistryAuth } from "../../runtime/snapshot/auth.ts";

export interface BenchTarget {
  kind: "local" | "server" | "kubernetes";
  manager: Manager & Required<Pick<Manager, "pause" | "resume">>;
  owner: string;
  /** registry URL for raw push/pull in the same run (undefined when unknown) */
  registry?: string;
  /** the raw push/pull's login, for a registry that wants one (rawRegistry.ts RAW_REPOSITORY) */
  rawAuth?: RegistryAuth;
  /** true once the sandbox holds no compute */
  computeGone(id: string): Promise<boolean>;
  /** the recorded snapshot of a paused sandbox, when the target can see it */
  snapshotOf?(id: string): Promise<unknown>;
  /** where a sandbox's compute is now (pod, node, warm or cold), when the target can see it */
  computeOf?(id: string): Promise<Record<string, unknown>>;
  /** untimed, just before a resume: bring the target to its stated condition (a full warm pool); returns evidence */
  beforeResume?(): Promise<Record<string, unknown>>;
  /** the snapshotter's durable steps of `id` since performance.now() `t0`, in ms from t0 (then forgotten) */
  stepsSince?(id: string, t0: number): { step: string; ms: number }[];
  environment: Record<string, unknown>;
  close(): Promise<void>;
}
