// The in-cluster layer registry's objects (sbx:snapshots.layerRegistry), as plain values: a
// distribution registry in `auth: token` mode that trusts the runtime's token certificate, so
// sandbox pods push and pull their own snapshot layers at one of its pods over plain HTTP
// inside the cluster, each with a token for its own repository (docs/pause-resume.md).
// Objects: ServiceAccount, Secret (config.yml and the certificate), the volume claim unless the
// storage is an emptyDir, Deployment, Service, and the NetworkPolicy that admits only sandbox
// and runtime pods. The runtime reaches it at its ready pods (runtime/k8s/registryEndpoint.ts).
import { createHash } from "node:crypto";
import { tokenAuthConfig } from "../../runtime/config/schema.ts";
import { NAMES } from "../runtime/render.ts";
import {
  type K8sObject,
  LAYER_REGISTRY,
  LAYER_REGISTRY_LABELS,
  partOf,
  restrictedContainerSecurity,
  restrictedPodSecurity,
} from "../shared/k8s.ts";
import type { LayerRegistryConfig, RegistryTokenConfig } from "../shared/platformConfig.ts";

/** S: a plain string in tests, a secret Output in the component (the file holds http.secret). */
export interface LayerRegistryRenderInput<S> {
  namespace: string;
  sandboxNamespace: string;
  config: LayerRegistryConfig;
  token: Pick<RegistryTokenConfig, "certificate" | "issuer" | "service">;
  /** layerRegistryConfigYaml's output */
  configYaml: S;
  /** storage kind s3: its region (the bucket's name, an Output, is only in configYaml) */
  s3Region?: string;
  nodeSelector?: Record<string, string>;
}

/**
 * distribution's configuration file. httpSecret signs upload state (the component derives it
 * from the token key); the pod's roll annotation hashes the file without it.
 */
export function layerRegistryConfigYaml(i: {
  token: LayerRegistryRenderInput<string>["token"];
  httpSecret: string;
  /** set: the s3 driver on this bucket (eks mode); else the filesystem under dataDir */
  s3?: { bucket: string; region: string };
}): string {
  const driver = i.s3
    ? [
        "  s3:",
        `    region: ${JSON.stringify(i.s3.region)}`,
        `    bucket: ${JSON.stringify(i.s3.bucket)}`,
        "    rootdirectory: /layers",
        // the pod's helper speaks plain HTTP to the registry and nothing else: blobs are served by
        // the registry itself, never as a redirect to a signed S3 URL
        "  redirect:",
        "    disable: true",
      ]
    : ["  filesystem:", `    rootdirectory: ${LAYER_REGISTRY.dataDir}`];
  return [
    "version: 0.1",
    "log:",
    "  level: info",
    "  formatter: json",
    "storage:",
    ...driver,
    "  delete:",
    "    enabled: true",
    // an upload a pod abandoned (its sandbox died mid-pause) is reclaimed after a day
    "  maintenance:",
    "    uploadpurging:",
    "      enabled: true",
    "      age: 24h",
    "      interval: 1h",
    "      dryrun: false",
    "http:",
    `  addr: :${LAYER_REGISTRY.port}`,
    `  secret: ${JSON.stringify(i.httpSecret)}`,
    ...tokenAuthConfig(i.token, `${LAYER_REGISTRY.configDir}/token-cert.pem`),
    "",
  ].join("\n");
}

// Over 60 lines on purpose: the registry's objects as plain literals, as Kubernetes reads them.
export function renderLayerRegistry<S>(i: LayerRegistryRenderInput<S>): K8sObject[] {
  const { name, port } = LAYER_REGISTRY;
  const ns = i.namespace;
  const labels = { ...partOf("layer-registry"), ...LAYER_REGISTRY_LABELS };
  // the registry reads both files at start only: either changing rolls its pod
  const rollSha = createHash("sha256")
    .update(
      layerRegistryConfigYaml({
        token: i.token,
        httpSecret: "",
        ...(i.s3Region ? { s3: { bucket: "", region: i.s3Region } } : {}),
      }),
    )
    .update(i.token.certificate)
    .digest("hex");
  const out: K8sObject[] = [
    {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name, namespace: ns, labels },
      automountServiceAccountToken: false,
    },
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: ns, labels },
      type: "Opaque",
      stringData: { "config.yml": i.configYaml, "token-cert.pem": i.token.certificate },
    },
  ];
  if (i.config.storage.kind === "volume") {
    const volume = i.config.storage;
    out.push({
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: { name, namespace: ns, labels },
      spec: {
        accessModes: ["ReadWriteOnce"],
        resources: { requests: { storage: volume.size } },
        ...(volume.storageClassName ? { storageClassName: volume.storageClassName } : {}),
      },
    });
  }
  const storage = i.config.storage;
  const data =
    storage.kind === "volume"
      ? { name: "data", persistentVolumeClaim: { claimName: name } }
      : // s3 keeps nothing on disk but the driver's temp files
        { name: "data", emptyDir: { sizeLimit: storage.kind === "emptyDir" ? storage.sizeLimit : "1Gi" } };
  out.push({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name, namespace: ns, labels },
    spec: {
      // one instance: the volume is ReadWriteOnce, and Recreate lets the new pod mount it
      replicas: 1,
      selector: { matchLabels: { ...LAYER_REGISTRY_LABELS } },
      strategy: { type: "Recreate" },
      template: {
        metadata: {
          labels,
          // a new certificate or config rolls the pod
          annotations: { "sbx.dev/config-sha256": rollSha },
        },
        spec: {
          serviceAccountName: name,
          automountServiceAccountToken: false,
          securityContext: restrictedPodSecurity(),
          ...(i.nodeSelector ? { nodeSelector: { ...i.nodeSelector } } : {}),
          terminationGracePeriodSeconds: 30,
          containers: [
            {
              name: "registry",
              image: i.config.image,
              command: [i.config.binary, "serve", `${LAYER_REGISTRY.configDir}/config.yml`],
              ports: [{ name: "http", containerPort: port, protocol: "TCP" }],
              volumeMounts: [
                { name: "config", mountPath: LAYER_REGISTRY.configDir, readOnly: true },
                { name: "data", mountPath: LAYER_REGISTRY.dataDir },
                { name: "tmp", mountPath: "/tmp" },
              ],
              // /v2/ answers 401 to anyone without a token: the probes check the port
              readinessProbe: { tcpSocket: { port: "http" }, periodSeconds: 5, failureThreshold: 3 },
              livenessProbe: { tcpSocket: { port: "http" }, initialDelaySeconds: 10, periodSeconds: 10 },
              resources: {
                requests: { cpu: i.config.cpu, memory: i.config.memory },
                limits: { memory: i.config.memory },
              },
              securityContext: restrictedContainerSecurity(),
            },
          ],
          volumes: [
            { name: "config", secret: { secretName: name, defaultMode: 0o440 } },
            data,
            { name: "tmp", emptyDir: { sizeLimit: "64Mi" } },
          ],
        },
      },
    },
  });
  out.push({
    apiVersion: "v1",
    kind: "Service",
    metadata: { name, namespace: ns, labels },
    spec: {
      type: "ClusterIP",
      selector: { ...LAYER_REGISTRY_LABELS },
      ports: [{ name: "http", port, targetPort: "http", protocol: "TCP" }],
    },
  });
  // only sandbox pods (their own repository, by token) and the runtime's pods reach it
  out.push({
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name, namespace: ns, labels },
    spec: {
      podSelector: { matchLabels: { ...LAYER_REGISTRY_LABELS } },
      policyTypes: ["Ingress"],
      ingress: [
        {
          from: [
            { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": i.sandboxNamespace } } },
            {
              podSelector: {
                matchExpressions: [
                  { key: "app.kubernetes.io/name", operator: "In", values: [NAMES.manager, NAMES.controller] },
                ],
              },
            },
          ],
          ports: [{ protocol: "TCP", port }],
        },
      ],
    },
  });
  return out;
}
