// The per-sandbox session policy the credential broker passes to AssumeRole. Pure and
// dependency-free so the runtime imports it too. The effective permissions are the
// intersection of the base role's policy and this one: `sandboxes/<id>/*` only.
import { ValidationError } from "../../runtime/core/errors.ts";
import { OBJECT_ACTIONS, SANDBOX_PREFIX, type PolicyDocument } from "./policies.ts";

/** STS rejects inline session policies over 2,048 plaintext characters (whitespace excluded). */
export const SESSION_POLICY_MAX_CHARS = 2048;
const SANDBOX_ID = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** Plain characters of a policy as STS counts them: JSON without whitespace. */
export function packedLength(policy: string): number {
  return policy.replace(/\s+/g, "").length;
}

export function sessionPolicyDocument(sandboxId: string, bucket: string, partition = "aws"): PolicyDocument {
  if (!SANDBOX_ID.test(sandboxId)) {
    throw new ValidationError("sandboxId", sandboxId, "use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit");
  }
  if (!BUCKET.test(bucket)) throw new ValidationError("bucket", bucket, "use an S3 bucket name (3-63 lowercase letters, digits, '.', '-')");
  const prefix = `${SANDBOX_PREFIX}/${sandboxId}`;
  const bucketArn = `arn:${partition}:s3:::${bucket}`;
  return {
    Version: "2012-10-17",
    Statement: [
      { Effect: "Allow", Action: [...OBJECT_ACTIONS], Resource: `${bucketArn}/${prefix}/*` },
      { Effect: "Allow", Action: ["s3:ListBucket"], Resource: bucketArn, Condition: { StringLike: { "s3:prefix": [`${prefix}/`, `${prefix}/*`] } } },
    ],
  };
}

/** JSON for STS AssumeRole's `Policy`. Throws if the id is invalid or the policy too large. */
export function buildSessionPolicy(sandboxId: string, bucket: string, partition = "aws"): string {
  const json = JSON.stringify(sessionPolicyDocument(sandboxId, bucket, partition));
  if (packedLength(json) >= SESSION_POLICY_MAX_CHARS) {
    throw new ValidationError("sessionPolicy", `${packedLength(json)} characters`, `must stay under ${SESSION_POLICY_MAX_CHARS}; shorten the bucket name or sandbox id`);
  }
  return json;
}
