// The controller half as the Kubernetes backend uses it. The controller (runtime/controller:
// leader election, reconciler, warm pool) is built in the composition root (runtime/kubernetes.ts)
// on top of the backend's parts, so imports run one way: controller -> k8s, never back.
import type { V1Pod } from "@kubernetes/client-node";
import type { PoolStatus, SandboxSpec } from "../core/types.ts";
import type { Reservation } from "./claims/writeBehind.ts";

/** The leader-elected reconcile loop. */
export interface ControlLoop {
  start(): void;
  stop(): Promise<void>;
  /** true while this replica holds the controller Lease */
  isLeader(): boolean;
  /** a record changed here: reconcile it now rather than at the next resync */
  enqueueSandbox(id: string): void;
}

/** The warm pool: ready pods of a (profile, size) that a create or a resume can take. */
export interface WarmPods {
  /** takes a ready pool pod for spec, relabelled as this sandbox's; undefined when none could be had */
  claim(spec: SandboxSpec): Promise<V1Pod | undefined>;
  /** chooses a ready pod in memory among those owns() allows; its guarded patch is sent behind (runtime/k8s/claims) */
  reserve(spec: SandboxSpec, owns: (podName: string) => boolean): Reservation | undefined;
  /** the ready pods reserve() could choose among those owns() allows, whatever their spec */
  claimable(owns: (podName: string) => boolean): V1Pod[];
  status(): PoolStatus[] | Promise<PoolStatus[]>;
  readonly stats: { claims: number; misses: number; conflicts: number };
}

export interface KubernetesControl {
  controller: ControlLoop;
  warmPool: WarmPods;
}
