// Pure description of the test control plane: each component's command line, the
// kubeconfig, the kwok configuration and the simulated nodes. boot.ts runs it.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { LAYER_REGISTRY } from "../../components/shared/k8s.ts";
import { tokenAuthConfig } from "../../runtime/config/schema.ts";
import { SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "../../runtime/k8s/contract.ts";

export interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kubelet: number;
  registry: number;
  /** a second registry in `auth: token` mode: pods move their layers with a token each */
  tokenRegistry: number;
}

export interface Layout {
  bin: string;
  /** Temporary directory of this run: pki/, etcd/, pods/, logs/, registry/ ... */
  dir: string;
}

export interface Command {
  name: string;
  command: string;
  args: string[];
}

export const KUBELET_PORT_PLACEHOLDER = "SBX_KUBELET_PORT";
export const REAL_NODES_PLACEHOLDER = "SBX_REAL_NODES";
/**
 * Nodes whose pods sbx-kubelet runs for real (kwok's pod Stages skip them): the untainted
 * system node, where the runtime's own Deployments land. Sandbox nodes stay kwok-played.
 */
export const REAL_NODES = ["sbx-system-0"] as const;
export const SERVICE_CIDR = "10.96.0.0/16";
/**
 * kwok's fake sandbox-pod addresses: the lower half of 10.244.0.0/16 only. The upper half holds
 * the real nodes' bridges (10.244.200-249.0/24, network.ts), one per control plane on this
 * machine; a fake address inside another run's bridge would route to that run's pods.
 */
export const POD_CIDR = "10.244.0.0/17";

export function pki(l: Layout, file: string): string {
  return join(l.dir, "pki", file);
}

export function adminKubeconfigPath(l: Layout): string {
  return join(l.dir, "admin.kubeconfig");
}

export function etcdCommand(l: Layout, p: Ports): Command {
  const peer = `http://127.0.0.1:${p.etcdPeer}`;
  const client = `http://127.0.0.1:${p.etcdClient}`;
  return {
    name: "etcd",
    command: join(l.bin, "etcd"),
    args: [
      "--name=sbx-test",
      `--data-dir=${join(l.dir, "etcd")}`,
      `--listen-client-urls=${client}`,
      `--advertise-client-urls=${client}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=sbx-test=${peer}`,
      // Test data is thrown away: skipping fsync makes every write ~10x cheaper.
      "--unsafe-no-fsync",
      "--log-level=warn",
    ],
  };
}

export function apiserverCommand(l: Layout, p: Ports): Command {
  return {
    name: "kube-apiserver",
    command: join(l.bin, "kube-apiserver"),
    args: [
      `--etcd-servers=http://127.0.0.1:${p.etcdClient}`,
      "--bind-address=127.0.0.1",
      "--advertise-address=127.0.0.1",
      `--secure-port=${p.apiserver}`,
      `--cert-dir=${join(l.dir, "apiserver-certs")}`,
      `--tls-cert-file=${pki(l, "apiserver.crt")}`,
      `--tls-private-key-file=${pki(l, "apiserver.key")}`,
      `--client-ca-file=${pki(l, "ca.crt")}`,
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      `--service-account-key-file=${pki(l, "sa.pub")}`,
      `--service-account-signing-key-file=${pki(l, "sa.key")}`,
      // Node,RBAC as in production clusters; the default admission plugins stay on
      // (NamespaceLifecycle, ServiceAccount, LimitRanger, ResourceQuota, ...).
      "--authorization-mode=Node,RBAC",
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      // exec and logs go to sbx-kubelet, reached at the nodes' InternalIP (127.0.0.1).
      `--kubelet-client-certificate=${pki(l, "kubelet-client.crt")}`,
      `--kubelet-client-key=${pki(l, "kubelet-client.key")}`,
      `--kubelet-certificate-authority=${pki(l, "ca.crt")}`,
      "--kubelet-preferred-address-types=InternalIP",
      "--allow-privileged=true",
      "--profiling=false",
      // A loopback address cannot be an Endpoints IP, so the `kubernetes` Service gets none
      // (nothing in-cluster dials it) instead of an error every 10 s.
      "--endpoint-reconciler-type=none",
      // Publishes a front-proxy CA, which the controller-manager and scheduler otherwise log
      // as missing every few seconds. No cert with the allowed name is ever issued.
      `--requestheader-client-ca-file=${pki(l, "ca.crt")}`,
      "--requestheader-allowed-names=front-proxy-client",
      "--requestheader-username-headers=X-Remote-User",
      "--requestheader-group-headers=X-Remote-Group",
      "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    ],
  };
}

function componentAuthArgs(l: Layout, port: number): string[] {
  const kc = adminKubeconfigPath(l);
  return [
    `--kubeconfig=${kc}`,
    `--authentication-kubeconfig=${kc}`,
    `--authorization-kubeconfig=${kc}`,
    "--bind-address=127.0.0.1",
    `--secure-port=${port}`,
    "--leader-elect=false",
  ];
}

export function controllerManagerCommand(l: Layout, p: Ports): Command {
  return {
    name: "kube-controller-manager",
    command: join(l.bin, "kube-controller-manager"),
    args: [
      ...componentAuthArgs(l, p.controllerManager),
      `--cert-dir=${join(l.dir, "kcm-certs")}`,
      // Token controller and the kube-root-ca.crt publisher.
      `--service-account-private-key-file=${pki(l, "sa.key")}`,
      `--root-ca-file=${pki(l, "ca.crt")}`,
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      // Quota status converges within a second instead of the default 5 minutes' resync.
      "--resource-quota-sync-period=5s",
      "--concurrent-gc-syncs=5",
    ],
  };
}

export function schedulerCommand(l: Layout, p: Ports): Command {
  return {
    name: "kube-scheduler",
    command: join(l.bin, "kube-scheduler"),
    args: [...componentAuthArgs(l, p.scheduler), `--cert-dir=${join(l.dir, "scheduler-certs")}`],
  };
}

/** The bridge network.ts created for the real nodes' pods. */
export interface PodNet {
  bridge: string;
  cidr: string;
}

export function kubeletCommand(l: Layout, p: Ports, net: PodNet): Command {
  return {
    name: "sbx-kubelet",
    command: join(l.bin, "sbx-kubelet"),
    args: [
      "serve",
      `--listen=127.0.0.1:${p.kubelet}`,
      `--tls-cert=${pki(l, "kubelet.crt")}`,
      `--tls-key=${pki(l, "kubelet.key")}`,
      `--kubeconfig=${adminKubeconfigPath(l)}`,
      `--root=${join(l.dir, "pods")}`,
      `--real-nodes=${REAL_NODES.join(",")}`,
      `--pod-bridge=${net.bridge}`,
      `--pod-cidr=${net.cidr}`,
      // In-cluster clients in a real pod dial 127.0.0.1:<port> (the API server's cert covers
      // it); so does the runtime for the registry. Both are forwarded into each pod.
      `--loopback-ports=${p.apiserver},${p.registry},${p.tokenRegistry}`,
      // Sandbox pods see the registries alone: they push and pull their own snapshot layers
      // (runtime/k8s/podLayers.ts), as a NetworkPolicy to the registry allows on a real cluster.
      `--sandbox-loopback-ports=${p.registry},${p.tokenRegistry}`,
      // and a layer registry the platform deploys on the real node, at its pod's address
      // (sbx:snapshots.layerRegistry), as a NetworkPolicy admitting it by label allows
      `--sandbox-pod-ports=${LAYER_REGISTRY.port}`,
      `--api-port=${p.apiserver}`,
    ],
  };
}

export function kwokCommand(l: Layout, configPath: string): Command {
  return {
    name: "kwok",
    command: join(l.bin, "kwok"),
    args: [
      `--kubeconfig=${adminKubeconfigPath(l)}`,
      `--config=${configPath}`,
      "--manage-all-nodes=true",
      "--node-ip=127.0.0.1",
      `--cidr=${POD_CIDR}`,
      "--node-lease-duration-seconds=40",
    ],
  };
}

export function registryConfig(l: Layout, p: Ports): string {
  return registryYaml(join(l.dir, "registry"), p.registry, []);
}

export const TOKEN_REGISTRY_NAMES = { issuer: "sbx-test", service: "sbx-test-registry" } as const;

/** the token registry's key pair, made at boot (runtime/snapshot/registryToken.ts tokenKeyPair) */
export function tokenRegistryFiles(l: Layout): { keyFile: string; certFile: string } {
  return { keyFile: pki(l, "registry-token.key"), certFile: pki(l, "registry-token.crt") };
}

export function tokenRegistryConfig(l: Layout, p: Ports): string {
  return registryYaml(
    join(l.dir, "token-registry"),
    p.tokenRegistry,
    tokenAuthConfig(TOKEN_REGISTRY_NAMES, tokenRegistryFiles(l).certFile),
  );
}

function registryYaml(root: string, port: number, auth: string[]): string {
  return [
    "version: 0.1",
    "log:",
    "  level: warn",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${root}`,
    "  delete:",
    "    enabled: true",
    "http:",
    `  addr: 127.0.0.1:${port}`,
    `  secret: sbx-test-${port}`,
    ...auth,
    "",
  ].join("\n");
}

/**
 * kwok's configuration file: its options plus every Stage from kwok-stages.yaml, with the
 * nodes' kubelet port set to sbx-kubelet's. (kwok's own --node-port would also make kwok
 * serve its host-level exec on that port, so the port is written into the stage instead.)
 */
export function kwokConfig(stagesPath: string, p: Ports): string {
  const options = [
    "apiVersion: config.kwok.x-k8s.io/v1alpha1",
    "kind: KwokConfiguration",
    "options:",
    // A config file replaces kwok's defaults for these, so they are all spelled out.
    "  podPlayStageParallelism: 8",
    "  nodePlayStageParallelism: 4",
    "  nodeLeaseParallelism: 4",
    "  podsOnNodeSyncParallelism: 4",
    "  enablePodsOnNodeSyncListPager: true",
  ].join("\n");
  const stages = readFileSync(stagesPath, "utf8");
  if (!stages.includes(KUBELET_PORT_PLACEHOLDER)) {
    throw new Error(`control plane: ${stagesPath} must set the node kubelet port to ${KUBELET_PORT_PLACEHOLDER}`);
  }
  const realNodes = REAL_NODES.map((n) => JSON.stringify(n)).join(", ");
  const filled = stages.replaceAll(KUBELET_PORT_PLACEHOLDER, String(p.kubelet));
  return `${options}\n---\n${filled.replaceAll(REAL_NODES_PLACEHOLDER, realNodes)}`;
}

export function kubeconfigYaml(server: string, caPem: string, certPem: string, keyPem: string): string {
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  return [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: sbx-test",
    "  cluster:",
    `    server: ${server}`,
    `    certificate-authority-data: ${b64(caPem)}`,
    "users:",
    "- name: sbx-admin",
    "  user:",
    `    client-certificate-data: ${b64(certPem)}`,
    `    client-key-data: ${b64(keyPem)}`,
    "contexts:",
    "- name: sbx-test",
    "  context:",
    "    cluster: sbx-test",
    "    user: sbx-admin",
    "current-context: sbx-test",
    "",
  ].join("\n");
}

export interface NodeSpec {
  name: string;
  labels: Record<string, string>;
  taints: { key: string; value: string; effect: string }[];
}

export const NODE_CAPACITY = { cpu: "4", memory: "16Gi", pods: "110", "ephemeral-storage": "100Gi" } as const;

/** Three sandbox nodes (labelled and tainted like the sandbox node group) and one system node. */
export function planNodes(sandboxNodes = 3): NodeSpec[] {
  const base = (name: string) => ({
    "kubernetes.io/hostname": name,
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    type: "kwok",
  });
  const nodes: NodeSpec[] = [];
  for (let i = 0; i < sandboxNodes; i++) {
    const name = `sbx-sandbox-${i}`;
    nodes.push({
      name,
      labels: { ...base(name), [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value },
      taints: [{ ...SANDBOX_NODE_TAINT }],
    });
  }
  nodes.push({
    name: "sbx-system-0",
    labels: { ...base("sbx-system-0"), [SANDBOX_NODE_LABEL.key]: "system" },
    taints: [],
  });
  return nodes;
}

export function nodeManifest(n: NodeSpec): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: n.name, labels: n.labels, annotations: { "node.alpha.kubernetes.io/ttl": "0" } },
    spec: { taints: n.taints },
    status: { capacity: { ...NODE_CAPACITY }, allocatable: { ...NODE_CAPACITY } },
  };
}
