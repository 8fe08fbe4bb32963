// Composition of the Kubernetes platform (part of the composition root; runtime/backends.ts
// loads it only when config.platform is kubernetes): the backend's shared parts (runtime/k8s),
// the controller half on top of them (runtime/controller: leader election, reconciler, warm
// pool), then the platform given that controller (runtime/k8s/assemble.ts). Built here so imports run one way: the
// controller uses k8s/, k8s/ never uses the controller (it knows it through k8s/control.ts).
import type { RuntimeConfig } from "./config/schema.ts";
import { Controller } from "./controller/controller.ts";
import { OwnSandboxes } from "./controller/ownSandboxes.ts";
import { SandboxReconciler } from "./controller/sandboxReconciler.ts";
import { WarmPool } from "./controller/warmpool.ts";
import { assembleKubernetesPlatform, type KubernetesPlatform } from "./k8s/assemble.ts";
import type { KubernetesBackend } from "./k8s/backend.ts";
import {
  createKubernetesParts,
  type KubernetesBackendOverrides,
  type KubernetesDeps,
  type KubernetesParts,
} from "./k8s/parts.ts";

export type { KubernetesBackend, KubernetesBackendOverrides, KubernetesPlatform };

/**
 * The controller half for these parts: one Lease per namespace pair, the warm pool, the
 * reconciler. The manager role never campaigns: it reconciles only the sandboxes it starts
 * (runtime/controller/ownSandboxes.ts) and claims from a pool that the controller refills.
 */
export function createKubernetesControl(p: KubernetesParts): {
  controller: Controller | OwnSandboxes;
  warmPool: WarmPool;
} {
  const { config, clock, logger, index, clients } = p;
  const warmPool = new WarmPool({ index, core: clients.core, config, clock, logger, resolveImage: p.resolveImage });
  const reconciler = new SandboxReconciler({
    index,
    core: clients.core,
    custom: clients.custom,
    config,
    clock,
    logger,
    deliverCredentials: p.deliverCredentials,
    orphanGraceMs: p.overrides.orphanGraceMs,
  });
  if (p.role === "manager") return { controller: new OwnSandboxes({ index, reconciler, clock, logger }), warmPool };
  const controller = new Controller({
    index,
    reconciler,
    warmPool,
    coordination: clients.coordination,
    leaseNamespace: config.kubernetes.runtimeNamespace,
    leaseName: config.kubernetes.leaseName,
    identity: p.identity,
    clock,
    logger,
    leaseDurationMs: p.overrides.leaseDurationMs,
    retryPeriodMs: p.overrides.retryPeriodMs,
  });
  return { controller, warmPool };
}

export function createKubernetesPlatform(
  config: RuntimeConfig,
  deps: KubernetesDeps,
  overrides: KubernetesBackendOverrides = {},
): KubernetesPlatform {
  const parts = createKubernetesParts(config, deps, overrides);
  return assembleKubernetesPlatform(parts, createKubernetesControl(parts));
}
