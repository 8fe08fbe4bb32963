// The policy pack, run on what the mocks captured (must be clean) and on bad resources
// (must be flagged with the rule's message).
import { beforeAll, describe, expect, it } from "vitest";
import { resourcePolicies, stackPolicies } from "../../policy/rules.ts";
import { planSandboxPod, planWarmPod } from "../../runtime/k8s/podTemplate.ts";
import { deploy } from "./deploy.ts";
import type { Captured } from "./mocks.ts";

interface Violation {
  policy: string;
  resource: string;
  message: string;
}

async function runPolicies(resources: Pick<Captured, "type" | "name" | "inputs">[]): Promise<Violation[]> {
  const violations: Violation[] = [];
  for (const r of resources) {
    for (const p of resourcePolicies) {
      const validations = Array.isArray(p.validateResource) ? p.validateResource : [p.validateResource];
      for (const v of validations) {
        const args = {
          type: r.type,
          props: r.inputs,
          urn: `urn:pulumi:test::sbx::${r.type}::${r.name}`,
          name: r.name,
        } as any;
        await v!(args, (message: string) => violations.push({ policy: p.name, resource: r.name, message }));
      }
    }
  }
  for (const p of stackPolicies) {
    const args = {
      resources: resources.map((r) => ({ type: r.type, props: r.inputs, urn: r.name, name: r.name })),
    } as any;
    await p.validateStack!(args, (message: string) =>
      violations.push({ policy: p.name, resource: "(stack)", message }),
    );
  }
  return violations;
}

let eks: Captured[];
let existing: Captured[];
beforeAll(async () => {
  eks = (await deploy("eks")).resources;
  existing = (await deploy("existing-cluster")).resources;
});

describe("the platform passes its own policy pack", () => {
  it("eks mode: no violations across every captured resource", async () => {
    expect(eks.length).toBeGreaterThan(60);
    expect(await runPolicies(eks)).toEqual([]);
  });

  it("existing-cluster mode: no violations", async () => {
    expect(await runPolicies(existing)).toEqual([]);
  });
});

describe("the runtime's sandbox pods pass the hardened-workload rule", () => {
  const size = {
    name: "nano",
    cpuRequestMillis: 100,
    cpuLimitMillis: 1000,
    memoryRequestBytes: 128 * 2 ** 20,
    memoryLimitBytes: 512 * 2 ** 20,
    workspaceBytes: 2 ** 30,
    tmpBytes: 2 ** 28,
    pids: 128,
  };
  const config = {
    kubernetes: { namespace: "sbx-sandboxes", runtimeNamespace: "sbx-system", leaseName: "sbx-controller" },
  };

  it("cold and warm sandbox pods from runtime/k8s/podTemplate.ts", async () => {
    const cold = planSandboxPod(
      {
        id: "sbx-1",
        owner: "alice",
        image: { profile: "base", image: "python:3.12-slim" },
        size,
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 60,
        metadata: {},
        createdAt: new Date(0),
      },
      config,
    );
    const warm = planWarmPod(
      { profile: "base", image: "python:3.12-slim", size, suffix: "abc12", activeDeadlineSeconds: 7200 },
      config,
    );
    expect(
      await runPolicies([
        { type: "kubernetes:core/v1:Pod", name: "cold", inputs: cold as any },
        { type: "kubernetes:core/v1:Pod", name: "warm", inputs: warm as any },
      ]),
    ).toEqual([]);
  });
});

describe("bad resources are flagged", () => {
  const deployment = (container: Record<string, unknown>, podSpec: Record<string, unknown> = {}) => ({
    spec: { template: { spec: { containers: [{ name: "app", image: "x", ...container }], ...podSpec } } },
  });
  const hardened = {
    securityContext: {
      runAsNonRoot: true,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    },
  };

  it.each<[string, string, Record<string, any>, string, string]>([
    [
      "public access block off",
      "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
      { blockPublicAcls: true, blockPublicPolicy: false, ignorePublicAcls: true, restrictPublicBuckets: true },
      "s3-no-public-bucket",
      "blockPublicPolicy must be true",
    ],
    [
      "public ACL",
      "aws:s3/bucketAcl:BucketAcl",
      { acl: "public-read" },
      "s3-no-public-bucket",
      'acl "public-read" makes the bucket public',
    ],
    [
      "no scan on push",
      "aws:ecr/repository:Repository",
      { imageScanningConfiguration: { scanOnPush: false }, imageTagMutability: "IMMUTABLE" },
      "ecr-scan-on-push",
      "scanOnPush must be true",
    ],
    [
      "mutable tags",
      "aws:ecr/repository:Repository",
      { imageScanningConfiguration: { scanOnPush: true }, imageTagMutability: "MUTABLE" },
      "ecr-scan-on-push",
      'imageTagMutability is "MUTABLE"',
    ],
    [
      "wildcard IAM action",
      "aws:iam/rolePolicy:RolePolicy",
      { policy: JSON.stringify({ Statement: [{ Effect: "Allow", Action: "s3:*", Resource: "arn:aws:s3:::b/*" }] }) },
      "iam-no-wildcards",
      "action s3:* is a wildcard",
    ],
    [
      "wildcard IAM resource",
      "aws:iam/rolePolicy:RolePolicy",
      { policy: JSON.stringify({ Statement: [{ Effect: "Allow", Action: ["s3:GetObject"], Resource: "*" }] }) },
      "iam-no-wildcards",
      'Resource "*" for s3:GetObject',
    ],
    [
      "wildcard verbs",
      "kubernetes:rbac.authorization.k8s.io/v1:Role",
      { rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["*"] }] },
      "k8s-no-wildcard-rbac",
      "rules[0].verbs contains a wildcard",
    ],
    [
      "wildcard resources",
      "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
      { rules: [{ apiGroups: [""], resources: ["*"], verbs: ["get"] }] },
      "k8s-no-wildcard-rbac",
      "rules[0].resources contains a wildcard",
    ],
    [
      "cluster-admin binding",
      "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
      { roleRef: { name: "cluster-admin" } },
      "k8s-no-wildcard-rbac",
      "binds cluster-admin",
    ],
    [
      "root container",
      "kubernetes:apps/v1:Deployment",
      deployment({ securityContext: { ...hardened.securityContext, runAsNonRoot: false } }),
      "k8s-hardened-workloads",
      "container app: set runAsNonRoot: true",
    ],
    [
      "privileged",
      "kubernetes:apps/v1:DaemonSet",
      deployment({ securityContext: { ...hardened.securityContext, privileged: true } }),
      "k8s-hardened-workloads",
      "container app is privileged",
    ],
    [
      "host network",
      "kubernetes:apps/v1:Deployment",
      deployment(hardened, { hostNetwork: true }),
      "k8s-hardened-workloads",
      "hostNetwork must not be true",
    ],
    [
      "hostPath",
      "kubernetes:core/v1:Pod",
      { spec: { containers: [{ name: "app", ...hardened }], volumes: [{ name: "root", hostPath: { path: "/" } }] } },
      "k8s-hardened-workloads",
      "volume root mounts a hostPath",
    ],
    [
      "writable root",
      "kubernetes:apps/v1:Deployment",
      deployment({ securityContext: { ...hardened.securityContext, readOnlyRootFilesystem: false } }),
      "k8s-hardened-workloads",
      "set readOnlyRootFilesystem: true",
    ],
    [
      "added capability",
      "kubernetes:apps/v1:Deployment",
      deployment({
        securityContext: { ...hardened.securityContext, capabilities: { drop: ["ALL"], add: ["NET_ADMIN"] } },
      }),
      "k8s-hardened-workloads",
      'adds capabilities ["NET_ADMIN"]',
    ],
    [
      "namespace without PSA",
      "kubernetes:core/v1:Namespace",
      { metadata: { name: "sbx-sandboxes", labels: { "app.kubernetes.io/part-of": "sbx" } } },
      "k8s-restricted-namespaces",
      "must carry pod-security.kubernetes.io/enforce: restricted",
    ],
  ])("%s", async (_label, type, inputs, policy, message) => {
    const violations = await runPolicies([{ type, name: "bad", inputs }]);
    expect(violations).toContainEqual({ policy, resource: "bad", message: expect.stringContaining(message) });
  });

  it("a bucket without a public access block fails the stack policy", async () => {
    const violations = await runPolicies([{ type: "aws:s3/bucket:Bucket", name: "b", inputs: {} }]);
    expect(violations).toEqual([
      {
        policy: "s3-every-bucket-blocked",
        resource: "(stack)",
        message: expect.stringContaining("1 bucket(s) but 0 public access block(s)"),
      },
    ]);
  });

  it("a hardened workload passes", async () => {
    expect(
      await runPolicies([{ type: "kubernetes:apps/v1:Deployment", name: "ok", inputs: deployment(hardened) }]),
    ).toEqual([]);
  });
});
