// SandboxPlatform under Pulumi mocks: assert the inputs of what each mode creates.
// Over 400 lines on purpose: one mocked deploy per mode is shared by every section (a deploy
// takes a second or more), so splitting the file would run them again per file.

import { generateKeyPairSync } from "node:crypto";
import type * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";
import { checkTokenKey } from "../../components/runtime/config.ts";
import { tokenKeyPair } from "../../runtime/snapshot/registryToken.ts";
import { deploy, type Deployed as Run } from "./deploy.ts";
import { FIXTURE_BUNDLE } from "./fixtures.ts";
import { countByType, isSecret, ofType, one } from "./mocks.ts";

let eks: Run;
let existing: Run;
const PAIR = tokenKeyPair({ now: new Date(0), commonName: "platform test" });
const statements = (json: string) => JSON.parse(json).Statement as any[];
const asList = (v: unknown) => (Array.isArray(v) ? v : [v]);

/** stack snapshots settings with pods moving their own layers, the token pair's public half */
function podLayers(token: Record<string, unknown> = {}, podRegistry = "http://10.244.0.1:5000") {
  return {
    snapshots: {
      repositoryUrl: "http://10.244.0.1:5000/sbx/snapshots",
      podRegistry,
      registryToken: { certificate: PAIR.certPem, service: "regs", ...token },
    },
  };
}
beforeAll(async () => {
  eks = await deploy("eks");
  existing = await deploy("existing-cluster");
});

describe("resource counts per mode", () => {
  it("eks mode creates every component", () => {
    const types = ofType(eks.resources, "sbx:platform:SandboxPlatform").length;
    expect(types).toBe(1);
    for (const t of [
      "sbx:network:Network",
      "sbx:cluster:Cluster",
      "sbx:images:ImageProfiles",
      "sbx:identity:Identity",
      "sbx:tenancy:Tenancy",
      "sbx:runtime:Runtime",
    ]) {
      expect(ofType(eks.resources, t), t).toHaveLength(1);
    }
    const counts = countByType(eks.resources);
    expect(counts["eks:index:Cluster"]).toBe(1);
    expect(counts["aws:eks/nodeGroup:NodeGroup"]).toBe(3); // system, sandbox, gpu
    expect(counts["aws:ec2/launchTemplate:LaunchTemplate"]).toBe(3);
    expect(counts["aws:eks/addon:Addon"]).toBe(3); // vpc-cni, pod identity agent, coredns
    expect(counts["aws:ecr/repository:Repository"]).toBe(6); // 5 profiles + snapshots
    expect(counts["aws:ec2/subnet:Subnet"]).toBe(4); // 2 AZs × private/public
    expect(counts["aws:eks/podIdentityAssociation:PodIdentityAssociation"]).toBe(2); // manager + controller
    expect(counts["kubernetes:apps/v1:DaemonSet"]).toBe(1); // image pre-pull
    expect(counts["kubernetes:apps/v1:Deployment"]).toBe(2);
  });

  it("existing-cluster mode deploys only Tenancy and Runtime", () => {
    const types = new Set(existing.resources.map((r) => r.type));
    for (const t of ["sbx:network:Network", "sbx:cluster:Cluster", "sbx:images:ImageProfiles", "sbx:identity:Identity"])
      expect(types.has(t), t).toBe(false);
    expect([...types].filter((t) => t.startsWith("aws:") || t.startsWith("eks:"))).toEqual([]);
    expect(ofType(existing.resources, "sbx:tenancy:Tenancy")).toHaveLength(1);
    expect(ofType(existing.resources, "sbx:runtime:Runtime")).toHaveLength(1);
    expect(countByType(existing.resources)).toMatchObject({
      "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition": 1,
      "kubernetes:apps/v1:Deployment": 2,
      "kubernetes:core/v1:Namespace": 2,
      "kubernetes:core/v1:ResourceQuota": 1,
      "kubernetes:networking.k8s.io/v1:NetworkPolicy": 2, // default deny + DNS; no egress configured
      // manager + controller in the sandbox namespace; controller Lease; manager's budget shares Lease
      "kubernetes:rbac.authorization.k8s.io/v1:Role": 4,
      "pulumi:providers:kubernetes": 1,
    });
  });
});

describe("cluster", () => {
  it("configures the VPC CNI for prefix delegation and network policy", () => {
    const cni = one(eks.resources, "aws:eks/addon:Addon", "vpc-cni");
    expect(JSON.parse(cni.inputs.configurationValues)).toEqual({
      env: { ENABLE_PREFIX_DELEGATION: "true", WARM_PREFIX_TARGET: "1" },
      enableNetworkPolicy: "true",
    });
  });

  it("creates every node group only after the vpc-cni and pod identity addons", () => {
    const groups = ofType(eks.resources, "aws:eks/nodeGroup:NodeGroup");
    for (const g of groups) {
      const deps = (eks.opts.get(g.name)?.dependsOn ?? []) as pulumi.Resource[];
      const names = deps.map((d) => (d as any).__name as string);
      expect(names, g.name).toEqual(
        expect.arrayContaining(["sbx-cluster-vpc-cni", "sbx-cluster-eks-pod-identity-agent"]),
      );
      expect(eks.opts.get(g.name)?.ignoreChanges, g.name).toEqual(["scalingConfig.desiredSize"]);
    }
  });

  it("CoreDNS waits for the system nodes and Kubernetes objects wait for CoreDNS", () => {
    const names = (n: string) =>
      ((eks.opts.get(n)?.dependsOn ?? []) as pulumi.Resource[]).map((d) => (d as any).__name);
    expect(names("sbx-cluster-coredns")).toEqual(["sbx-cluster-system"]);
    expect(names("sbx-cluster-k8s")).toEqual(["sbx-cluster-coredns"]);
  });

  it.each([
    ["system", { "sbx.dev/node-role": "system" }, [], "AL2023_x86_64_STANDARD", 110],
    [
      "sandbox",
      { "sbx.dev/node-role": "sandbox" },
      [{ key: "sbx.dev/sandbox", value: "true", effect: "NO_SCHEDULE" }],
      "AL2023_x86_64_STANDARD",
      110,
    ],
    [
      "gpu",
      { "sbx.dev/node-role": "sandbox", "sbx.dev/accelerator": "nvidia" },
      [
        { key: "sbx.dev/sandbox", value: "true", effect: "NO_SCHEDULE" },
        { key: "nvidia.com/gpu", value: "true", effect: "NO_SCHEDULE" },
      ],
      "AL2023_x86_64_NVIDIA",
      110,
    ],
  ])("node group %s: labels, taints, AMI and max pods", (group, labels, taints, amiType, maxPods) => {
    const ng = one(eks.resources, "aws:eks/nodeGroup:NodeGroup", `-${group}`);
    expect(ng.inputs.labels).toEqual(labels);
    expect(ng.inputs.taints ?? []).toEqual(taints);
    expect(ng.inputs.amiType).toBe(amiType);
    const lt = one(eks.resources, "aws:ec2/launchTemplate:LaunchTemplate", `-${group}`);
    const userData = Buffer.from(lt.inputs.userData, "base64").toString("utf8");
    expect(userData).toContain(`maxPods: ${maxPods}`);
    expect(lt.inputs.metadataOptions).toMatchObject({ httpTokens: "required", httpPutResponseHopLimit: 1 });
    expect(ng.inputs.launchTemplate).toMatchObject({ version: "1" });
  });

  it("sizes the sandbox group from config and uses API auth with access entries", () => {
    const ng = one(eks.resources, "aws:eks/nodeGroup:NodeGroup", "-sandbox");
    expect(ng.inputs.scalingConfig).toEqual({ minSize: 1, maxSize: 30, desiredSize: 2 });
    expect(ng.inputs.instanceTypes).toEqual(["m7i.xlarge"]);
    const c = ofType(eks.resources, "eks:index:Cluster")[0];
    expect(c.inputs).toMatchObject({
      name: "sbx-test",
      version: "1.33",
      authenticationMode: "API",
      skipDefaultNodeGroup: true,
      enabledClusterLogTypes: ["api", "audit", "authenticator"],
    });
    expect(c.inputs.accessEntries["admin-0"].principalArn).toBe("arn:aws:iam::123456789012:role/Admin");
  });
});

describe("image profiles", () => {
  it("every repository scans on push and has immutable tags and a lifecycle", () => {
    const repos = ofType(eks.resources, "aws:ecr/repository:Repository");
    expect(repos.map((r) => r.inputs.name).sort()).toEqual([
      "sbx-test/sandbox-base",
      "sbx-test/sandbox-data",
      "sbx-test/sandbox-ml",
      "sbx-test/sandbox-rl",
      "sbx-test/sandbox-web",
      "sbx-test/snapshots",
    ]);
    for (const r of repos) {
      expect(r.inputs.imageScanningConfiguration, r.name).toEqual({ scanOnPush: true });
      expect(r.inputs.imageTagMutability, r.name).toBe("IMMUTABLE");
    }
    expect(ofType(eks.resources, "aws:ecr/lifecyclePolicy:LifecyclePolicy")).toHaveLength(6);
    const snap = one(eks.resources, "aws:ecr/lifecyclePolicy:LifecyclePolicy", "snapshots");
    expect(
      JSON.parse(snap.inputs.policy).rules.find(
        (r: { selection: { tagStatus: string } }) => r.selection.tagStatus === "any",
      ).selection,
    ).toMatchObject({ countType: "sinceImagePushed", countNumber: 8 }); // retention 7 + 1 (images/plan.ts)
  });
});

describe("identity", () => {
  it("IAM documents grant no wildcard actions and no wildcard resources except ECR login", () => {
    const docs = [
      ...ofType(eks.resources, "aws:iam/rolePolicy:RolePolicy").map((p) => p.inputs.policy),
      ...ofType(eks.resources, "aws:iam/role:Role").map((r) => r.inputs.assumeRolePolicy),
    ];
    expect(docs.length).toBe(5);
    for (const d of docs) {
      for (const s of statements(d)) {
        for (const a of asList(s.Action)) expect(a).not.toContain("*");
        if (asList(s.Resource).includes("*")) expect(s.Action).toEqual(["ecr:GetAuthorizationToken"]);
      }
    }
  });

  it("the base role reaches only sandboxes/* and only the manager role may assume it", () => {
    const base = one(eks.resources, "aws:iam/rolePolicy:RolePolicy", "sandbox-base");
    expect(statements(base.inputs.policy)[0].Resource).toBe("arn:aws:s3:::sbx-test-outputs-abc123/sandboxes/*");
    const role = one(eks.resources, "aws:iam/role:Role", "sandbox-base");
    expect(statements(role.inputs.assumeRolePolicy)[0]).toMatchObject({
      Principal: { AWS: "arn:aws:iam::123456789012:role/sbx-identity-manager" },
      Action: ["sts:AssumeRole", "sts:TagSession"],
    });
    const mgr = one(eks.resources, "aws:iam/role:Role", "identity-manager");
    expect(statements(mgr.inputs.assumeRolePolicy)[0].Principal).toEqual({ Service: "pods.eks.amazonaws.com" });
  });

  it("the outputs bucket blocks public access and is encrypted", () => {
    expect(ofType(eks.resources, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")[0].inputs).toMatchObject({
      blockPublicAcls: true,
      blockPublicPolicy: true,
      ignorePublicAcls: true,
      restrictPublicBuckets: true,
    });
    expect(
      ofType(eks.resources, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")[0]
        .inputs.rules[0].applyServerSideEncryptionByDefault.sseAlgorithm,
    ).toBe("AES256");
  });

  it.each(["sbx-manager", "sbx-controller"])("associates the %s service account with the manager role", (sa) => {
    const a = ofType(eks.resources, "aws:eks/podIdentityAssociation:PodIdentityAssociation").find(
      (r) => r.inputs.serviceAccount === sa,
    );
    expect(a?.inputs).toMatchObject({
      clusterName: "sbx-test",
      namespace: "sbx-system",
      serviceAccount: sa,
      roleArn: "arn:aws:iam::123456789012:role/sbx-identity-manager",
    });
  });
});

describe("tenancy and runtime in eks mode", () => {
  it("quota hard values come from the budget and size classes", () => {
    const q = ofType(eks.resources, "kubernetes:core/v1:ResourceQuota")[0];
    // nano: cpu limit/request = 10, memory 4 → limits scale by the largest ratio
    expect(q.inputs.spec.hard).toEqual({
      "requests.cpu": "250",
      "limits.cpu": "2500",
      "requests.memory": "500Gi",
      "limits.memory": "2000Gi",
      pods: "2500",
    });
  });

  it("the egress policy cuts the VPC and metadata endpoints out of 0.0.0.0/0", () => {
    const np = one(eks.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress");
    expect(np.inputs.spec.egress[0]).toEqual({
      to: [{ ipBlock: { cidr: "0.0.0.0/0", except: ["169.254.169.254/32", "169.254.170.23/32", "10.0.0.0/16"] } }],
      ports: [{ protocol: "TCP", port: 443 }],
    });
  });

  it("runtime pods run on system nodes with the bundle's hash on the pod template", () => {
    for (const d of ofType(eks.resources, "kubernetes:apps/v1:Deployment")) {
      const tpl = d.inputs.spec.template;
      expect(tpl.spec.nodeSelector).toEqual({ "sbx.dev/node-role": "system" });
      expect(tpl.metadata.annotations["sbx.dev/runtime-sha256"]).toBe(FIXTURE_BUNDLE.sha256);
    }
  });

  it("config.json carries the AWS outputs the runtime needs", () => {
    const cm = one(eks.resources, "kubernetes:core/v1:ConfigMap", "configmap-sbx-config");
    const cfg = JSON.parse(cm.inputs.data["config.json"]);
    expect(cfg.credentials).toEqual({
      baseRoleArn: "arn:aws:iam::123456789012:role/sbx-identity-sandbox-base",
      bucket: "sbx-test-outputs-abc123",
      region: "us-east-1",
      durationSeconds: 900,
    });
    expect(cfg.snapshots).toEqual({
      registry: "123456789012.dkr.ecr.us-east-1.amazonaws.com",
      repository: "sbx-test/snapshots",
      retentionDays: 7,
    });
    expect(cfg.catalog.base).toBe("123456789012.dkr.ecr.us-east-1.amazonaws.com/sbx-test/sandbox-base:v1");
    expect(cfg.budget).toEqual({ cpu: "250", memory: "500Gi" });
  });
});

describe("sbx:runtime.userNamespaces", () => {
  const configOf = (run: Run) =>
    JSON.parse(one(run.resources, "kubernetes:core/v1:ConfigMap", "configmap-sbx-config").inputs.data["config.json"]);
  it("reaches the runtime's config.json as kubernetes.userNamespaces, and is off unless set", async () => {
    expect(configOf(existing).kubernetes.userNamespaces).toBeUndefined();
    const on = await deploy("existing-cluster", { runtime: { userNamespaces: true } });
    expect(configOf(on).kubernetes.userNamespaces).toBe(true);
  });
});

describe("sbx:snapshots.repositoryUrl (existing-cluster mode)", () => {
  const configOf = (run: Run) =>
    JSON.parse(one(run.resources, "kubernetes:core/v1:ConfigMap", "configmap-sbx-config").inputs.data["config.json"]);
  it("is off without a registry: existing-cluster mode creates none", () => {
    expect(configOf(existing).snapshots).toBeUndefined();
  });
  it("names the registry pause/resume use, a plain-HTTP scheme kept on the registry part", async () => {
    const run = await deploy("existing-cluster", {
      snapshots: { repositoryUrl: "http://10.244.0.1:5000/sbx/snapshots", retentionDays: 3 },
    });
    expect(configOf(run).snapshots).toEqual({
      registry: "http://10.244.0.1:5000",
      repository: "sbx/snapshots",
      retentionDays: 3,
    });
    const off = await deploy("existing-cluster", {
      snapshots: { enabled: false, repositoryUrl: "registry.example.com/sbx-snapshots" },
    });
    expect(configOf(off).snapshots).toBeUndefined();
  });
  it("podRegistry with registryToken: pods move their layers with a token each, the pair a Secret in both roles", async () => {
    const run = await deploy("existing-cluster", podLayers(), { registryTokenKey: PAIR.keyPem });
    expect(configOf(run).snapshots).toMatchObject({
      podRegistry: "http://10.244.0.1:5000",
      tokenAuth: {
        keyFile: "/etc/sbx/registry-token/key.pem",
        certFile: "/etc/sbx/registry-token/cert.pem",
        issuer: "sbx",
        service: "regs",
        ttlSeconds: 900,
      },
    });
    expect(JSON.stringify(configOf(run))).not.toContain("PRIVATE KEY");
    // the pair is a Secret of the component's own; the key stays marked secret on the wire
    const secret = one(run.resources, "kubernetes:core/v1:Secret", "sbx-registry-token");
    expect(secret.inputs.stringData).toEqual({ "key.pem": PAIR.keyPem, "cert.pem": PAIR.certPem });
    expect(isSecret(secret.raw.stringData) || isSecret(secret.raw.stringData["key.pem"])).toBe(true);
    const config = one(run.resources, "kubernetes:core/v1:ConfigMap", "sbx-config");
    expect(isSecret(config.raw.data) || isSecret(config.raw.data["config.json"])).toBe(false);
    for (const role of ["sbx-manager", "sbx-controller"]) {
      const pod = one(run.resources, "kubernetes:apps/v1:Deployment", `deployment-${role}`).inputs.spec.template.spec;
      expect(pod.volumes).toContainEqual({
        name: "registry-token",
        secret: { secretName: "sbx-registry-token", defaultMode: 0o440 },
      });
      expect(pod.containers[0].volumeMounts).toContainEqual({
        name: "registry-token",
        mountPath: "/etc/sbx/registry-token",
        readOnly: true,
      });
    }
    // a new certificate (with its key) rolls the pods
    const other = tokenKeyPair({ now: new Date(0) });
    const next = await deploy("existing-cluster", podLayers({ certificate: other.certPem }), {
      registryTokenKey: other.keyPem,
    });
    const sha = (r: Run) =>
      one(r.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-manager").inputs.spec.template.metadata
        .annotations["sbx.dev/config-sha256"];
    expect(sha(next)).not.toBe(sha(run));
    // sandboxes may reach the registry's address and port, and nothing more than before
    const np = one(run.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress");
    expect(np.inputs.spec.egress).toEqual([
      { to: [{ ipBlock: { cidr: "10.244.0.1/32" } }], ports: [{ protocol: "TCP", port: 5000 }] },
    ]);
    // without it, no pod gets the volume, no Secret is made, and no egress policy exists
    const plain = one(existing.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-manager").inputs.spec;
    expect(plain.template.spec.volumes.map((v: { name: string }) => v.name)).not.toContain("registry-token");
    expect(ofType(existing.resources, "kubernetes:core/v1:Secret").map((r) => r.name)).not.toContainEqual(
      expect.stringContaining("registry-token"),
    );
    expect(ofType(existing.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy")).toHaveLength(2);
  });
  it("podRegistry is refused without each of its three settings, a registry of its own, or as a name", async () => {
    const key = { registryTokenKey: PAIR.keyPem };
    await expect(
      deploy("existing-cluster", { snapshots: { ...podLayers().snapshots, registryToken: undefined } }, key),
    ).rejects.toThrow(/sbx:snapshots.registryToken: .*together/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...podLayers().snapshots, podRegistry: undefined } }, key),
    ).rejects.toThrow(/sbx:snapshots.podRegistry: .*together/);
    await expect(deploy("existing-cluster", podLayers())).rejects.toThrow(
      /sbx:registryTokenKey: .*together.*pulumi config set --secret sbx:registryTokenKey/,
    );
    await expect(
      deploy("existing-cluster", { snapshots: { ...podLayers().snapshots, repositoryUrl: undefined } }, key),
    ).rejects.toThrow(/sbx:snapshots.podRegistry.*needs sbx:snapshots.repositoryUrl/);
    await expect(deploy("existing-cluster", podLayers({}, "http://registry.sbx.svc:5000"), key)).rejects.toThrow(
      /sbx:snapshots.podRegistry.*IPv4 address.*resolves no names/,
    );
    await expect(deploy("existing-cluster", podLayers({ certificate: "not a cert" }), key)).rejects.toThrow(
      /sbx:snapshots.registryToken.certificate.*is not a PEM certificate.*sbx registry-token-key/,
    );
    const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
    expect(() =>
      checkTokenKey(rsa.privateKey.export({ type: "pkcs8", format: "pem" }).toString(), PAIR.certPem),
    ).toThrow(/sbx:registryTokenKey.*is not the key of sbx:snapshots.registryToken.certificate/);
    expect(() => checkTokenKey("garbage", PAIR.certPem)).toThrow(/sbx:registryTokenKey.*not a PEM private key/);
    expect(checkTokenKey(PAIR.keyPem, PAIR.certPem)).toBe(PAIR.keyPem);
  });
  it("layerRegistry: the platform runs the registry, the runtime reaches it at its pods, sandboxes by label", async () => {
    const layers = (over: Record<string, unknown> = {}) => ({
      snapshots: {
        registryToken: { certificate: PAIR.certPem, service: "regs" },
        layerRegistry: { storage: { kind: "volume", size: "50Gi", storageClassName: "fast" }, ...over },
      },
    });
    const run = await deploy("existing-cluster", layers(), { registryTokenKey: PAIR.keyPem });
    expect(configOf(run).snapshots).toMatchObject({
      registry: "http://sbx-layer-registry.sbx-system.svc:5000",
      repository: "sbx-snapshots",
      inCluster: true,
      tokenAuth: { keyFile: "/etc/sbx/registry-token/key.pem", service: "regs" },
    });
    expect(configOf(run).snapshots.podRegistry).toBeUndefined();
    const dep = one(run.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-layer-registry").inputs;
    expect(dep.metadata.namespace).toBe("sbx-system");
    expect(dep.spec.strategy).toEqual({ type: "Recreate" });
    const pod = dep.spec.template.spec;
    expect(pod.containers[0].image).toBe("registry:3.0.0");
    expect(pod.containers[0].command).toEqual(["/bin/registry", "serve", "/etc/sbx-layer-registry/config.yml"]);
    expect(pod.containers[0].securityContext).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(pod.volumes).toContainEqual({ name: "data", persistentVolumeClaim: { claimName: "sbx-layer-registry" } });
    // the key never reaches the registry: only the certificate, and a secret derived from the key
    const secret = one(run.resources, "kubernetes:core/v1:Secret", "secret-sbx-layer-registry");
    const yml = secret.inputs.stringData["config.yml"] as string;
    expect(yml).toContain("rootcertbundle: /etc/sbx-layer-registry/token-cert.pem");
    expect(yml).toContain('service: "regs"');
    expect(yml).toMatch(/secret: "[0-9a-f]{32}"/);
    expect(secret.inputs.stringData["token-cert.pem"]).toBe(PAIR.certPem);
    expect(JSON.stringify(secret.inputs)).not.toContain("PRIVATE KEY");
    expect(isSecret(secret.raw.stringData) || isSecret(secret.raw.stringData["config.yml"])).toBe(true);
    const pvc = one(run.resources, "kubernetes:core/v1:PersistentVolumeClaim", "sbx-layer-registry").inputs;
    expect(pvc.spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "50Gi" } },
      storageClassName: "fast",
    });
    expect(one(run.resources, "kubernetes:core/v1:Service", "service-sbx-layer-registry").inputs.spec.ports).toEqual([
      { name: "http", port: 5000, targetPort: "http", protocol: "TCP" },
    ]);
    // sandboxes may reach the registry's pods on its port, by label; it admits sandboxes and the runtime only
    const egress = one(run.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress");
    expect(egress.inputs.spec.egress).toEqual([
      {
        to: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sbx-system" } },
            podSelector: { matchLabels: { "app.kubernetes.io/name": "sbx-layer-registry" } },
          },
        ],
        ports: [{ protocol: "TCP", port: 5000 }],
      },
    ]);
    const ingress = one(run.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "sbx-layer-registry").inputs;
    expect(ingress.spec.policyTypes).toEqual(["Ingress"]);
    expect(ingress.spec.ingress[0].from[0]).toEqual({
      namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sbx-sandboxes" } },
    });
    // both roles may read where its pods are
    const runtimeRole = one(run.resources, "kubernetes:rbac.authorization.k8s.io/v1:Role", "sbx-controller-runtime");
    expect(runtimeRole.inputs.rules).toContainEqual({
      apiGroups: ["discovery.k8s.io"],
      resources: ["endpointslices"],
      verbs: ["list"],
    });
    // an emptyDir for trials: no claim
    const trial = await deploy(
      "existing-cluster",
      layers({ storage: { kind: "emptyDir", sizeLimit: "2Gi" }, binary: "/usr/bin/docker-registry" }),
      { registryTokenKey: PAIR.keyPem },
    );
    const tpod = one(trial.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-layer-registry").inputs.spec
      .template.spec;
    expect(tpod.volumes).toContainEqual({ name: "data", emptyDir: { sizeLimit: "2Gi" } });
    expect(tpod.containers[0].command[0]).toBe("/usr/bin/docker-registry");
    expect(ofType(trial.resources, "kubernetes:core/v1:PersistentVolumeClaim")).toEqual([]);
    // a new certificate rolls the registry's pod
    const other = tokenKeyPair({ now: new Date(0) });
    const next = await deploy(
      "existing-cluster",
      { snapshots: { ...layers().snapshots, registryToken: { certificate: other.certPem, service: "regs" } } },
      { registryTokenKey: other.keyPem },
    );
    const roll = (r: Run) =>
      one(r.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-layer-registry").inputs.spec.template.metadata
        .annotations["sbx.dev/config-sha256"];
    expect(roll(next)).not.toBe(roll(run));
  });
  it("layerRegistry in eks mode: an S3 bucket of its own, a role that reaches it alone, no ECR snapshot repository", async () => {
    const run = await deploy(
      "eks",
      { snapshots: { registryToken: { certificate: PAIR.certPem }, layerRegistry: {} } },
      { registryTokenKey: PAIR.keyPem },
    );
    const counts = countByType(run.resources);
    expect(counts["aws:ecr/repository:Repository"]).toBe(5); // the profiles; snapshots are in the bucket
    expect(counts["aws:s3/bucket:Bucket"]).toBe(2); // outputs + layers
    expect(counts["aws:eks/podIdentityAssociation:PodIdentityAssociation"]).toBe(3); // + the registry
    expect(configOf(run).snapshots).toMatchObject({
      registry: "http://sbx-layer-registry.sbx-system.svc:5000",
      inCluster: true,
    });
    const layers = "arn:aws:s3:::sbx-test-layers-abc123";
    const policy = statements(
      one(run.resources, "aws:iam/rolePolicy:RolePolicy", "layer-registry-registry").inputs.policy,
    );
    expect(policy.map((st) => st.Resource)).toEqual([layers, `${layers}/*`]);
    expect(policy.flatMap((st) => asList(st.Action))).not.toContain("s3:PutBucketPolicy");
    const role = one(run.resources, "aws:iam/role:Role", "layer-registry-registry");
    expect(statements(role.inputs.assumeRolePolicy)[0].Principal).toEqual({ Service: "pods.eks.amazonaws.com" });
    expect(
      one(run.resources, "aws:eks/podIdentityAssociation:PodIdentityAssociation", "layer-registry-registry").inputs,
    ).toMatchObject({ namespace: "sbx-system", serviceAccount: "sbx-layer-registry" });
    const bucketParts = ofType(run.resources, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock");
    expect(bucketParts.map((b) => b.inputs.restrictPublicBuckets)).toEqual([true, true]);
    // the registry serves blobs itself: the helper speaks plain HTTP to it, never to S3
    const yml = one(run.resources, "kubernetes:core/v1:Secret", "secret-sbx-layer-registry").inputs.stringData[
      "config.yml"
    ] as string;
    expect(yml).toContain('bucket: "sbx-test-layers-abc123"');
    expect(yml).toContain('region: "us-east-1"');
    expect(yml).toMatch(/redirect:\n\s+disable: true/);
    expect(yml).not.toContain("filesystem:");
    const dep = one(run.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-layer-registry");
    expect(dep.inputs.spec.template.spec.nodeSelector).toEqual(
      one(run.resources, "kubernetes:apps/v1:Deployment", "deployment-sbx-manager").inputs.spec.template.spec
        .nodeSelector,
    );
    expect(ofType(run.resources, "kubernetes:core/v1:PersistentVolumeClaim")).toEqual([]);
    // sandboxes reach its pods by label (the VPC CIDR cut out of every other rule does not touch it)
    const egress = one(run.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress").inputs.spec
      .egress;
    expect(egress).toContainEqual({
      to: [
        {
          namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sbx-system" } },
          podSelector: { matchLabels: { "app.kubernetes.io/name": "sbx-layer-registry" } },
        },
      ],
      ports: [{ protocol: "TCP", port: 5000 }],
    });
    // the manager's role keeps no ECR snapshot rights
    const mgr = statements(one(run.resources, "aws:iam/rolePolicy:RolePolicy", "identity-manager").inputs.policy);
    expect(mgr.flatMap((st) => asList(st.Action))).not.toContain("ecr:PutImage");
  });
  it("layerRegistry is refused with a registry of the stack's own, without the token pair, or malformed", async () => {
    const key = { registryTokenKey: PAIR.keyPem };
    const base = { registryToken: { certificate: PAIR.certPem }, layerRegistry: {} };
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, repositoryUrl: "http://10.244.0.1:5000/x" } }, key),
    ).rejects.toThrow(/sbx:snapshots.repositoryUrl: .*layer registry is where snapshots go/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, podRegistry: "http://10.244.0.1:5000" } }, key),
    ).rejects.toThrow(/sbx:snapshots.podRegistry: .*layer registry/);
    await expect(deploy("existing-cluster", { snapshots: base })).rejects.toThrow(
      /sbx:registryTokenKey: .*layer registry trusts the runtime's token pair/,
    );
    await expect(deploy("existing-cluster", { snapshots: { layerRegistry: {} } }, key)).rejects.toThrow(
      /sbx:snapshots.registryToken: .*token pair/,
    );
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, layerRegistry: { storage: { kind: "s3" } } } }, key),
    ).rejects.toThrow(/sbx:snapshots.layerRegistry.storage.kind.*eks mode only/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, layerRegistry: { storage: { kind: "nfs" } } } }, key),
    ).rejects.toThrow(/sbx:snapshots.layerRegistry.storage.kind/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, layerRegistry: { binary: "registry" } } }, key),
    ).rejects.toThrow(/sbx:snapshots.layerRegistry.binary.*absolute path/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, layerRegistry: { storage: { size: "lots" } } } }, key),
    ).rejects.toThrow(/sbx:snapshots.layerRegistry.storage.size/);
    await expect(
      deploy("existing-cluster", { snapshots: { ...base, layerRegistry: { replicas: 2 } } }, key),
    ).rejects.toThrow(/sbx:snapshots.layerRegistry.*replicas/);
  });
  it("is refused in eks mode, which makes its own ECR repository, and when malformed", async () => {
    await expect(deploy("eks", { snapshots: { repositoryUrl: "registry.example.com/x" } })).rejects.toThrow(
      /sbx:snapshots.repositoryUrl.*eks mode creates its own ECR repository/,
    );
    await expect(
      deploy("existing-cluster", { snapshots: { repositoryUrl: "http://10.244.0.1:5000" } }),
    ).rejects.toThrow(/sbx:snapshots.repositoryUrl.*<registry>\/<repository>/);
  });
});
