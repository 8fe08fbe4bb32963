// The port relay's runtime on the test cluster: the Kubernetes backend with snapshots into the
// suite's registry (so a port request can wake a paused sandbox), the real Manager with an audit
// log (resumes are counted there), and the HTTP app on a real socket (a relay is about sockets).
// Exposures live in the sandbox's metadata as the service keeps them on Kubernetes
// (portOptionsFrom), so a second replica on the same namespaces sees them.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { buildManager } from "../../../runtime/backends.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { KubernetesBackendOverrides } from "../../../runtime/kubernetes.ts";
import { buildApp } from "../../../runtime/server/app.ts";
import { type PortOptions, portOptionsFrom } from "../../../runtime/server/ports/service.ts";
import { sandbox, startServer } from "../../server/ports-support.ts";
import { registryUrl, waitFor } from "../../support/cluster.ts";
import { testTokens } from "../../support/local.ts";
import { pauseConfig } from "../pause/runtime.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
  testPlatform,
} from "../runtime/support.ts";

export interface K8sPortReplica {
  url: string;
  port: number;
  platform: KubernetesPlatform;
  backend: KubernetesBackend;
  manager: SandboxManager;
  app: ReturnType<typeof buildApp>;
  close(): Promise<void>;
}

export interface K8sPortRuntime extends K8sPortReplica {
  config: RuntimeConfig;
  /** resume lines of the audit log for a sandbox */
  resumesOf(id: string): number;
  /** lines of the audit log for a sandbox and op (pause, resume, ...): a read that is no activity */
  audited(id: string, op: string): number;
  /** another service replica on the same namespaces (its own backend, Manager and app) */
  replica(identity: string, ports?: PortOptions): Promise<K8sPortReplica>;
}

export interface K8sPortRuntimeOptions {
  ports?: PortOptions;
  /** run the Manager's maintenance tasks (automatic pause among them) */
  maintenance?: boolean;
  /** the backend's overrides, e.g. commandChannel: { enabled: false } for the port-forward path */
  backend?: KubernetesBackendOverrides;
}

async function startReplica(
  config: RuntimeConfig,
  identity: string,
  ports: PortOptions,
  maintenance: boolean,
  overrides: KubernetesBackendOverrides = {},
): Promise<K8sPortReplica> {
  const logger = silentLogger();
  const platform = testPlatform(config, adminClients(await testKubeconfigPath()), { ...overrides, identity });
  const { backend } = platform;
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform, reaperIntervalMs: 3_600_000 });
  const app = buildApp({
    manager,
    tokens: testTokens(),
    logger,
    metrics: manager.metrics.registry,
    ports: { ...portOptionsFrom(config), clock: systemClock, ...ports },
    e2b: false,
  });
  await manager.start({ reaper: false, maintenance });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return {
    url,
    port: Number(new URL(url).port),
    platform,
    backend,
    manager,
    app,
    close: async () => {
      await app.close();
      await manager.close();
    },
  };
}

function audited(path: string, id: string, op: string): number {
  let text = "";
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return 0;
  }
  return text.split("\n").filter((l) => l.includes(`"op":"${op}"`) && l.includes(`"sandbox":"${id}"`)).length;
}

export async function startK8sPortRuntime(prefix: string, o: K8sPortRuntimeOptions = {}): Promise<K8sPortRuntime> {
  const clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  const ns: TestNamespaces = await freshNamespaces(clients.core, prefix);
  const auditPath = join(process.cwd(), ".cache", `k8s-ports-audit-${process.pid}-${prefix}.jsonl`);
  const config: RuntimeConfig = {
    ...pauseConfig({ namespaces: ns, registry: registryUrl(), warm: 0 }),
    audit: { path: auditPath },
  };
  const first = await startReplica(config, `${prefix}-test`, o.ports ?? {}, o.maintenance ?? false, o.backend);
  const replicas: K8sPortReplica[] = [];
  return {
    ...first,
    config,
    resumesOf: (id) => audited(auditPath, id, "resume"),
    audited: (id, op) => audited(auditPath, id, op),
    replica: async (identity, ports = {}) => {
      const r = await startReplica(config, identity, { ...o.ports, ...ports }, false, o.backend);
      replicas.push(r);
      return r;
    },
    close: async () => {
      for (const r of replicas) await r.close().catch(() => undefined);
      await first.close();
      await ns.cleanup();
    },
  };
}

/** The runtime, leading, with one sandbox whose fixture server listens on port 8000. */
export async function startK8sPortSandbox(
  prefix: string,
  o: K8sPortRuntimeOptions = {},
): Promise<{ rt: K8sPortRuntime; id: string }> {
  const rt = await startK8sPortRuntime(prefix, o);
  try {
    await waitFor("leadership", async () => rt.platform.testing.controller.isLeader(), 20_000);
    const id = await sandbox(rt);
    await startServer(rt, id, 8000);
    return { rt, id };
  } catch (err) {
    await rt.close();
    throw err;
  }
}
