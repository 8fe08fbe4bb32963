// sbx's security rules as @pulumi/policy validations. Plain functions over (type, props) so
// the tests run them on the resources the Pulumi mocks captured; index.ts serves them as a
// policy pack for `pulumi preview --policy-pack policy`.
import type {
  ReportViolation,
  ResourceValidationArgs,
  ResourceValidationPolicy,
  StackValidationPolicy,
} from "@pulumi/policy";

// a resource's inputs as the policy engine hands them over (untyped JSON); each rule reads only its fields
type Props = ResourceValidationArgs["props"];
const list = (v: unknown): unknown[] => (v === undefined || v === null ? [] : Array.isArray(v) ? v : [v]);

// ---- S3 -------------------------------------------------------------------------------
const PUBLIC_ACLS = ["public-read", "public-read-write", "authenticated-read"];

export function checkBucketNotPublic(type: string, props: Props, report: ReportViolation): void {
  if (type === "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock") {
    for (const k of ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"]) {
      if (props[k] !== true) report(`${k} must be true: sandbox outputs are never public`);
    }
  }
  if ((type === "aws:s3/bucket:Bucket" || type === "aws:s3/bucketAcl:BucketAcl") && PUBLIC_ACLS.includes(props.acl)) {
    report(`acl "${props.acl}" makes the bucket public; remove it`);
  }
}

/** Every bucket needs a public access block (the engine can't match unknown ids at preview). */
export function checkEveryBucketBlocked(resources: { type: string }[], report: ReportViolation): void {
  const buckets = resources.filter((r) => r.type === "aws:s3/bucket:Bucket").length;
  const blocks = resources.filter((r) => r.type === "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").length;
  if (blocks < buckets)
    report(`${buckets} bucket(s) but ${blocks} public access block(s); give every bucket a BucketPublicAccessBlock`);
}

// ---- ECR -------------------------------------------------------------------------------
export function checkEcrScanOnPush(type: string, props: Props, report: ReportViolation): void {
  if (type !== "aws:ecr/repository:Repository") return;
  if (props.imageScanningConfiguration?.scanOnPush !== true)
    report("imageScanningConfiguration.scanOnPush must be true");
  if (props.imageTagMutability !== "IMMUTABLE")
    report(
      `imageTagMutability is ${JSON.stringify(props.imageTagMutability)}; use "IMMUTABLE" so a tag always means one image`,
    );
}

// ---- IAM -------------------------------------------------------------------------------
/** No `*` in actions; Resource "*" only for ECR login, which has no resource-level permissions. */
export function checkIamNoWildcards(type: string, props: Props, report: ReportViolation): void {
  const docs: unknown[] = [];
  if (type === "aws:iam/rolePolicy:RolePolicy" || type === "aws:iam/policy:Policy") docs.push(props.policy);
  if (type === "aws:iam/role:Role") docs.push(props.assumeRolePolicy);
  for (const raw of docs) {
    if (raw === undefined) continue; // unknown at preview
    const doc = typeof raw === "string" ? JSON.parse(raw) : raw;
    for (const s of list((doc as Props).Statement) as Props[]) {
      const actions = list(s.Action) as string[];
      for (const a of actions) if (a.includes("*")) report(`action ${a} is a wildcard; list the exact actions`);
      if (list(s.NotAction).length || list(s.NotResource).length)
        report("NotAction/NotResource grant everything else; list what is allowed");
      if (list(s.Resource).includes("*") && !(actions.length === 1 && actions[0] === "ecr:GetAuthorizationToken")) {
        report(`Resource "*" for ${actions.join(", ")}; scope it to ARNs (only ecr:GetAuthorizationToken may use "*")`);
      }
    }
  }
}

// ---- Kubernetes RBAC -------------------------------------------------------------------
const RBAC_ROLE_TYPES = [
  "kubernetes:rbac.authorization.k8s.io/v1:Role",
  "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
];

export function checkNoWildcardRbac(type: string, props: Props, report: ReportViolation): void {
  if (RBAC_ROLE_TYPES.includes(type)) {
    for (const [i, rule] of (list(props.rules) as Props[]).entries()) {
      for (const field of ["verbs", "resources", "apiGroups"]) {
        if ((list(rule[field]) as string[]).some((v) => v.includes("*")))
          report(`rules[${i}].${field} contains a wildcard; list exact ${field}`);
      }
    }
  }
  if (
    type === "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding" &&
    props.roleRef?.name === "cluster-admin"
  ) {
    report("binds cluster-admin; use a namespaced Role with the rules from runtime/k8s/contract.ts");
  }
}

// ---- Hardened workloads ----------------------------------------------------------------
const WORKLOADS: Record<string, (p: Props) => Props | undefined> = {
  "kubernetes:core/v1:Pod": (p) => p.spec,
  "kubernetes:apps/v1:Deployment": (p) => p.spec?.template?.spec,
  "kubernetes:apps/v1:DaemonSet": (p) => p.spec?.template?.spec,
  "kubernetes:apps/v1:StatefulSet": (p) => p.spec?.template?.spec,
  "kubernetes:core/v1:PodTemplate": (p) => p.template?.spec,
};

export function checkHardenedPod(type: string, props: Props, report: ReportViolation): void {
  const spec = WORKLOADS[type]?.(props);
  if (!spec) return;
  for (const k of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[k] === true) report(`${k} must not be true`);
  for (const v of list(spec.volumes) as Props[]) if (v.hostPath) report(`volume ${v.name} mounts a hostPath`);
  const podSc = (spec.securityContext ?? {}) as Props;
  const containers = [...(list(spec.initContainers) as Props[]), ...(list(spec.containers) as Props[])];
  for (const c of containers) {
    const sc = (c.securityContext ?? {}) as Props;
    const where = `container ${c.name}`;
    if (sc.privileged === true) report(`${where} is privileged`);
    if (sc.allowPrivilegeEscalation !== false) report(`${where}: set securityContext.allowPrivilegeEscalation: false`);
    if ((sc.runAsNonRoot ?? podSc.runAsNonRoot) !== true) report(`${where}: set runAsNonRoot: true`);
    if (sc.readOnlyRootFilesystem !== true) report(`${where}: set readOnlyRootFilesystem: true`);
    if (!(list(sc.capabilities?.drop) as string[]).includes("ALL")) report(`${where}: drop ALL capabilities`);
    if (list(sc.capabilities?.add).length) report(`${where}: adds capabilities ${JSON.stringify(sc.capabilities.add)}`);
    if ((sc.seccompProfile?.type ?? podSc.seccompProfile?.type) !== "RuntimeDefault")
      report(`${where}: use seccompProfile RuntimeDefault`);
  }
}

/** Namespaces sbx ships must enforce Pod Security `restricted`. */
export function checkRestrictedNamespace(type: string, props: Props, report: ReportViolation): void {
  if (type !== "kubernetes:core/v1:Namespace") return;
  const labels = (props.metadata?.labels ?? {}) as Record<string, string>;
  if (labels["app.kubernetes.io/part-of"] === "sbx" && labels["pod-security.kubernetes.io/enforce"] !== "restricted") {
    report(`namespace ${props.metadata?.name} must carry pod-security.kubernetes.io/enforce: restricted`);
  }
}

const resourcePolicy = (
  name: string,
  description: string,
  check: (type: string, props: Props, report: ReportViolation) => void,
): ResourceValidationPolicy => ({
  name,
  description,
  enforcementLevel: "mandatory",
  validateResource: (args, report) => check(args.type, args.props, report),
});

export const resourcePolicies: ResourceValidationPolicy[] = [
  resourcePolicy(
    "s3-no-public-bucket",
    "S3 buckets block all public access and use no public ACL.",
    checkBucketNotPublic,
  ),
  resourcePolicy("ecr-scan-on-push", "ECR repositories scan on push and have immutable tags.", checkEcrScanOnPush),
  resourcePolicy("iam-no-wildcards", "IAM documents name exact actions and resources.", checkIamNoWildcards),
  resourcePolicy(
    "k8s-no-wildcard-rbac",
    "Roles list exact verbs, resources and API groups; no cluster-admin bindings.",
    checkNoWildcardRbac,
  ),
  resourcePolicy(
    "k8s-hardened-workloads",
    "Pods and pod templates run non-root, read-only, without privileges or host access.",
    checkHardenedPod,
  ),
  resourcePolicy(
    "k8s-restricted-namespaces",
    "sbx namespaces enforce Pod Security restricted.",
    checkRestrictedNamespace,
  ),
];

export const stackPolicies: StackValidationPolicy[] = [
  {
    name: "s3-every-bucket-blocked",
    description: "Every S3 bucket has a public access block.",
    enforcementLevel: "mandatory",
    validateStack: (args, report) => checkEveryBucketBlocked(args.resources, report),
  },
];
