// Starts the test control plane's processes in dependency order and waits until each one
// really works (not merely until its port opens), failing with what broke and how to fix it.
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { tokenKeyPair } from "../../runtime/snapshot/registryToken.ts";
import { setupPodNetwork, teardownPodNetwork } from "./network.ts";
import * as plan from "./plan.ts";
import { freePort, type ProcessGroup, type Started, waitUntil } from "./processes.ts";

export interface Cluster {
  server: string;
  kubeconfigPath: string;
  registryUrl: string;
  registryHost: string;
  /** the registry in `auth: token` mode, its key pair and names (plan.ts tokenRegistryConfig) */
  tokenRegistry: { url: string; keyFile: string; certFile: string; issuer: string; service: string };
}

const REGISTRY_BIN = "/usr/bin/docker-registry";
const STAGES = new URL("./kwok-stages.yaml", import.meta.url).pathname;

interface TlsFiles {
  ca: string;
  cert?: string;
  key?: string;
}

/** GET over HTTPS with optional client cert; resolves the status code and body. */
function httpsGet(url: string, tls: TlsFiles | "insecure"): Promise<{ status: number; body: string }> {
  const opts =
    tls === "insecure"
      ? { rejectUnauthorized: false }
      : { ca: readFileSync(tls.ca), cert: tls.cert && readFileSync(tls.cert), key: tls.key && readFileSync(tls.key) };
  return new Promise((resolve, reject) => {
    const req = request(url, { ...opts, timeout: 2_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return res.ok;
}

async function allocatePorts(): Promise<plan.Ports> {
  const names = [
    "etcdClient",
    "etcdPeer",
    "apiserver",
    "controllerManager",
    "scheduler",
    "kubelet",
    "registry",
    "tokenRegistry",
  ] as const;
  const ports = new Set<number>();
  while (ports.size < names.length) ports.add(await freePort());
  const list = [...ports];
  return Object.fromEntries(names.map((n, i) => [n, list[i]])) as unknown as plan.Ports;
}

function start(group: ProcessGroup, c: plan.Command): Started {
  return group.start(c.name, c.command, c.args);
}

export async function bootCluster(l: plan.Layout, group: ProcessGroup): Promise<Cluster> {
  const pkiRun = spawnSync(join(l.bin, "sbx-kubelet"), ["pki", `--dir=${join(l.dir, "pki")}`], { encoding: "utf8" });
  if (pkiRun.status !== 0) {
    throw new Error(
      `control plane: generating certificates failed: ${pkiRun.stderr || pkiRun.error}. Rebuild with npm run tools:k8s.`,
    );
  }
  const p = await allocatePorts();
  const server = `https://127.0.0.1:${p.apiserver}`;
  const admin: TlsFiles = { ca: plan.pki(l, "ca.crt"), cert: plan.pki(l, "admin.crt"), key: plan.pki(l, "admin.key") };
  const kubeconfigPath = plan.adminKubeconfigPath(l);
  writeFileSync(
    kubeconfigPath,
    plan.kubeconfigYaml(
      server,
      readFileSync(admin.ca, "utf8"),
      readFileSync(admin.cert!, "utf8"),
      readFileSync(admin.key!, "utf8"),
    ),
    { mode: 0o600 },
  );

  // The registry does not depend on the cluster: start it first and check it last.
  const registryConfig = join(l.dir, "registry.yml");
  writeFileSync(registryConfig, plan.registryConfig(l, p));
  const registry = group.start("docker-registry", REGISTRY_BIN, ["serve", registryConfig]);
  const tokenFiles = plan.tokenRegistryFiles(l);
  const pair = tokenKeyPair({ now: new Date(), commonName: "sbx test registry tokens" });
  writeFileSync(tokenFiles.keyFile, pair.keyPem, { mode: 0o600 });
  writeFileSync(tokenFiles.certFile, pair.certPem);
  const tokenRegistryConfig = join(l.dir, "token-registry.yml");
  writeFileSync(tokenRegistryConfig, plan.tokenRegistryConfig(l, p));
  const tokenRegistry = group.start("docker-registry-token", REGISTRY_BIN, ["serve", tokenRegistryConfig]);

  const etcd = start(group, plan.etcdCommand(l, p));
  await waitUntil(
    "etcd to report healthy",
    etcd,
    async () => {
      const res = await fetch(`http://127.0.0.1:${p.etcdClient}/health`, { signal: AbortSignal.timeout(2_000) });
      return res.ok && ((await res.json()) as { health?: string }).health === "true";
    },
    "Check the etcd log; a port clash is retried by re-running the suite.",
  );

  const apiserver = start(group, plan.apiserverCommand(l, p));
  await waitUntil(
    "kube-apiserver /readyz",
    apiserver,
    async () => {
      return (await httpsGet(`${server}/readyz`, admin)).status === 200;
    },
    "Check the kube-apiserver log (flags in tools/control-plane/plan.ts).",
    90_000,
  );

  // The real nodes' pod network; removed once every process (sbx-kubelet first) has stopped.
  const podNet = setupPodNetwork(l.dir);
  group.onStopped(() => teardownPodNetwork(podNet.bridge));
  // registered after the network, so it runs before: a sandbox that outlived sbx-kubelet dies
  // with the run, and the suite hears of it (test/setup/hygiene.ts)
  group.sweepOnStop(l.dir);

  const kwokConfigPath = join(l.dir, "kwok.yaml");
  writeFileSync(kwokConfigPath, plan.kwokConfig(STAGES, p));
  const kcm = start(group, plan.controllerManagerCommand(l, p));
  const scheduler = start(group, plan.schedulerCommand(l, p));
  const kubelet = start(group, plan.kubeletCommand(l, p, podNet));
  const kwok = start(group, plan.kwokCommand(l, kwokConfigPath));

  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  for (const node of plan.planNodes()) {
    await core.createNode({ body: plan.nodeManifest(node) });
  }

  await Promise.all([
    waitUntil(
      "kube-scheduler /healthz",
      scheduler,
      async () => (await httpsGet(`https://127.0.0.1:${p.scheduler}/healthz`, "insecure")).status === 200,
      "Check the kube-scheduler log.",
    ),
    waitUntil(
      "kube-controller-manager to create the default service account",
      kcm,
      async () => {
        await core.readNamespacedServiceAccount({ name: "default", namespace: "default" });
        return true;
      },
      "Check the kube-controller-manager log.",
    ),
    waitUntil(
      "sbx-kubelet /healthz",
      kubelet,
      async () => (await httpsGet(`https://127.0.0.1:${p.kubelet}/healthz`, { ca: admin.ca })).status === 200,
      "Check the sbx-kubelet log; it needs bubblewrap (/usr/bin/bwrap: apt-get install bubblewrap).",
    ),
    waitUntil(
      "kwok to mark every node Ready",
      kwok,
      async () => {
        const nodes = (await core.listNode()).items;
        const ready = nodes.filter((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
        return ready.length === plan.planNodes().length;
      },
      "Check the kwok log and tools/control-plane/kwok-stages.yaml.",
    ),
    waitUntil(
      "docker-registry to answer /v2/",
      registry,
      () => httpOk(`http://127.0.0.1:${p.registry}/v2/`),
      `Check the registry log; it needs ${REGISTRY_BIN} (apt-get install docker-registry, or scripts/install-debian.sh).`,
    ),
    waitUntil(
      "the token registry to answer /v2/ with its challenge",
      tokenRegistry,
      async () =>
        (await fetch(`http://127.0.0.1:${p.tokenRegistry}/v2/`, { signal: AbortSignal.timeout(2_000) })).status === 401,
      "Check the docker-registry-token log (tools/control-plane/plan.ts tokenRegistryConfig).",
    ),
  ]);

  return {
    server,
    kubeconfigPath,
    registryUrl: `http://127.0.0.1:${p.registry}`,
    registryHost: `127.0.0.1:${p.registry}`,
    tokenRegistry: { url: `http://127.0.0.1:${p.tokenRegistry}`, ...tokenFiles, ...plan.TOKEN_REGISTRY_NAMES },
  };
}
