// What the Kubernetes backend and the controller half share, built once per process: API
// clients, the informer-fed SandboxIndex, this replica's identity, the catalog, and how to run
// a command in a pod (credentials delivery included). The composition root (runtime/kubernetes.ts)
// builds these, then the controller on them, then the backend.
import { randomUUID } from "node:crypto";
import type { Role } from "../config/role.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import { catalogFrom, type ImageLookup } from "../core/catalog.ts";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { CommandChannelOptions } from "./channel/sandboxChannels.ts";
import { type KubeClients, loadKubeClients } from "./client.ts";
import { type CredentialBroker, createStsCredentialBroker } from "./credentials.ts";
import { credentialsDelivery, podRunner, type RunInPod } from "./podExec.ts";
import { SandboxIndex } from "./sandboxIndex.ts";

/** Optional wiring for tests and benchmarks; production passes none of it. */
export interface KubernetesBackendOverrides {
  clients?: KubeClients;
  broker?: CredentialBroker;
  /** leader-election identity; defaults to a random one per process */
  identity?: string;
  leaseDurationMs?: number;
  retryPeriodMs?: number;
  activityFlushMs?: number;
  orphanGraceMs?: number;
  /** the command channel (runtime/k8s/channel/sandboxChannels.ts); default on */
  commandChannel?: CommandChannelOptions;
}

export interface KubernetesDeps {
  logger: Logger;
  clock: Clock;
  /** the Manager's catalog (buildManager); else config.catalog + config.catalogPath read once */
  catalog?: ImageLookup;
  /** the process role (runtime/config/role.ts); manager: no Lease. Default all */
  role?: Role;
  /** this replica's name (the pod's, POD_NAME) when the overrides give none; else a random one */
  identity?: string;
}

export interface KubernetesParts {
  config: RuntimeConfig;
  clock: Clock;
  /** bound to backend=kubernetes */
  logger: Logger;
  clients: KubeClients;
  namespace: string;
  index: SandboxIndex;
  /** this replica's name: the controller Lease holder and the pause/resume record holder */
  identity: string;
  resolveImage(profile: string): string | undefined;
  runInPod: RunInPod;
  /** absent when the credential broker is off */
  broker?: CredentialBroker;
  /** absent when the credential broker is off */
  deliverCredentials?: (id: string, podName: string) => Promise<Date>;
  overrides: KubernetesBackendOverrides;
  role: Role;
}

export function createKubernetesParts(
  config: RuntimeConfig,
  deps: KubernetesDeps,
  overrides: KubernetesBackendOverrides = {},
): KubernetesParts {
  const { clock } = deps;
  const logger = deps.logger.child({ backend: "kubernetes" });
  const clients = overrides.clients ?? loadKubeClients(config.kubernetes.kubeconfigPath);
  const namespace = config.kubernetes.namespace;
  const broker = overrides.broker ?? (config.credentials ? createStsCredentialBroker(config.credentials) : undefined);
  const catalog = catalogFrom(config, logger, deps.catalog);
  const runInPod = podRunner(clients.kc, namespace, clock);
  return {
    config,
    clock,
    logger,
    clients,
    namespace,
    index: new SandboxIndex({ credentialsRequired: !!broker, clock, logger }),
    identity: overrides.identity ?? deps.identity ?? `sbx-${randomUUID().slice(0, 8)}`,
    resolveImage: (profile) => catalog.imageOf(profile),
    runInPod,
    broker,
    deliverCredentials: credentialsDelivery(broker, runInPod),
    overrides,
    role: deps.role ?? "all",
  };
}
