// IAM documents for sandbox storage isolation. Pure: ARNs in, JSON-ready objects out.
// One base role reaches only `sandboxes/*`; the manager assumes it per sandbox with a
// session policy (runtime/k8s/sessionPolicy.ts, a pure module shared with the runtime) that
// narrows it to `sandboxes/<id>/*`; the prefix and the object actions come from there.
import { SANDBOX_OBJECT_ACTIONS, SANDBOX_PREFIX } from "../../runtime/k8s/sessionPolicy.ts";

export { SANDBOX_PREFIX };
export const OBJECT_ACTIONS = SANDBOX_OBJECT_ACTIONS;

export interface Statement {
  Sid?: string;
  Effect: "Allow" | "Deny";
  Action: string[];
  Resource?: string | string[];
  Principal?: Record<string, string | string[]>;
  Condition?: Record<string, Record<string, string | string[]>>;
}
export interface PolicyDocument {
  Version: "2012-10-17";
  Statement: Statement[];
}

/**
 * The only action granted on Resource "*": ECR login has no resource-level permissions
 * (AWS documents GetAuthorizationToken as account-wide). The policy pack and tests allow
 * exactly this exception and nothing else.
 */
export const ECR_LOGIN_ACTION = "ecr:GetAuthorizationToken";
export const SNAPSHOT_ACTIONS = [
  "ecr:BatchCheckLayerAvailability",
  "ecr:BatchGetImage",
  "ecr:GetDownloadUrlForLayer",
  "ecr:InitiateLayerUpload",
  "ecr:UploadLayerPart",
  "ecr:CompleteLayerUpload",
  "ecr:PutImage",
  "ecr:DescribeImages",
  "ecr:ListImages",
  "ecr:BatchDeleteImage",
];

const doc = (...Statement: Statement[]): PolicyDocument => ({ Version: "2012-10-17", Statement });

/** The manager's role is assumed by EKS Pod Identity (which always tags the session). */
export function managerTrustPolicy(): PolicyDocument {
  return doc({
    Effect: "Allow",
    Principal: { Service: "pods.eks.amazonaws.com" },
    Action: ["sts:AssumeRole", "sts:TagSession"],
  });
}

/** Only the manager's role may assume the base role; it may tag the session (sandbox id). */
export function baseRoleTrustPolicy(managerRoleArn: string): PolicyDocument {
  return doc({ Effect: "Allow", Principal: { AWS: managerRoleArn }, Action: ["sts:AssumeRole", "sts:TagSession"] });
}

export function baseRolePolicy(bucketArn: string): PolicyDocument {
  return doc(
    {
      Sid: "SandboxObjects",
      Effect: "Allow",
      Action: [...OBJECT_ACTIONS],
      Resource: `${bucketArn}/${SANDBOX_PREFIX}/*`,
    },
    {
      Sid: "ListSandboxPrefix",
      Effect: "Allow",
      Action: ["s3:ListBucket"],
      Resource: bucketArn,
      Condition: { StringLike: { "s3:prefix": [`${SANDBOX_PREFIX}/*`] } },
    },
  );
}

export function managerPolicy(baseRoleArn: string, snapshotRepositoryArn?: string): PolicyDocument {
  const statements: Statement[] = [
    { Sid: "AssumeBaseRole", Effect: "Allow", Action: ["sts:AssumeRole", "sts:TagSession"], Resource: baseRoleArn },
  ];
  if (snapshotRepositoryArn) {
    statements.push(
      { Sid: "SnapshotRegistry", Effect: "Allow", Action: [...SNAPSHOT_ACTIONS], Resource: snapshotRepositoryArn },
      { Sid: "RegistryLogin", Effect: "Allow", Action: [ECR_LOGIN_ACTION], Resource: "*" },
    );
  }
  return doc(...statements);
}

/** Node role: AWS managed policies only; VPC CNI and ECR pulls run as the node. */
export const NODE_MANAGED_POLICIES = [
  "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
  "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
  "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
];

export function nodeTrustPolicy(): PolicyDocument {
  return doc({ Effect: "Allow", Principal: { Service: "ec2.amazonaws.com" }, Action: ["sts:AssumeRole"] });
}

/**
 * The layer registry's role (sbx:snapshots.layerRegistry in eks mode): its own bucket alone,
 * the actions distribution's s3 driver uses (objects and multipart uploads).
 */
export function layerRegistryPolicy(bucketArn: string): PolicyDocument {
  return doc(
    {
      Sid: "LayerBucket",
      Effect: "Allow",
      Action: ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
      Resource: bucketArn,
    },
    {
      Sid: "LayerObjects",
      Effect: "Allow",
      Action: [
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:ListMultipartUploadParts",
        "s3:AbortMultipartUpload",
      ],
      Resource: `${bucketArn}/*`,
    },
  );
}
