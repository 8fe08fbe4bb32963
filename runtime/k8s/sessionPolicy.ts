// The per-sandbox session policy the credential broker passes to STS AssumeRole. The effective
// permissions are the intersection of the base role's policy and this one: `sandboxes/<id>/*`
// only. Pure and dependency-free: it is one of the modules the Pulumi tree may import
// (components/identity/policies.ts builds the base role from the same prefix and actions), so
// the role the package creates and the policy the broker sends cannot drift apart.
import { ValidationError } from "../core/errors.ts";

/** The object prefix every sandbox's outputs live under; the base role reaches only this. */
export const SANDBOX_PREFIX = "sandboxes";
/** What a sandbox may do to its own objects. */
export const SANDBOX_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"];
/** STS rejects inline session policies over 2,048 plaintext characters (whitespace excluded). */
export const SESSION_POLICY_MAX_CHARS = 2048;

export interface SessionPolicy {
  Version: "2012-10-17";
  Statement: {
    Effect: "Allow";
    Action: string[];
    Resource: string | string[];
    Condition?: Record<string, Record<string, string | string[]>>;
  }[];
}

const SANDBOX_ID = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** Plain characters of a policy as STS counts them: JSON without whitespace. */
export function packedLength(policy: string): number {
  return policy.replace(/\s+/g, "").length;
}

/** The document for one sandbox; throws a ValidationError for a bad id or bucket (size is not checked). */
export function sessionPolicyDocument(sandboxId: string, bucket: string, partition = "aws"): SessionPolicy {
  if (!SANDBOX_ID.test(sandboxId)) {
    throw new ValidationError(
      "sandboxId",
      sandboxId,
      "use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    );
  }
  if (!BUCKET.test(bucket))
    throw new ValidationError("bucket", bucket, "use an S3 bucket name (3-63 lowercase letters, digits, '.', '-')");
  const prefix = `${SANDBOX_PREFIX}/${sandboxId}`;
  const bucketArn = `arn:${partition}:s3:::${bucket}`;
  return {
    Version: "2012-10-17",
    Statement: [
      { Effect: "Allow", Action: [...SANDBOX_OBJECT_ACTIONS], Resource: `${bucketArn}/${prefix}/*` },
      {
        Effect: "Allow",
        Action: ["s3:ListBucket"],
        Resource: bucketArn,
        Condition: { StringLike: { "s3:prefix": [`${prefix}/`, `${prefix}/*`] } },
      },
    ],
  };
}

/** What AssumeRole's `Policy` parameter gets. Throws if the id is invalid or the policy too large. */
export function sessionPolicyJson(sandboxId: string, bucket: string, partition = "aws"): string {
  const json = JSON.stringify(sessionPolicyDocument(sandboxId, bucket, partition));
  if (packedLength(json) >= SESSION_POLICY_MAX_CHARS) {
    throw new ValidationError(
      "sessionPolicy",
      `${packedLength(json)} characters`,
      `must stay under ${SESSION_POLICY_MAX_CHARS}; shorten the bucket name or sandbox id`,
    );
  }
  return json;
}

/** The policy document for one sandbox, size-checked like the JSON STS receives. */
export function buildSessionPolicy(sandboxId: string, bucket: string): SessionPolicy {
  return JSON.parse(sessionPolicyJson(sandboxId, bucket)) as SessionPolicy;
}
