// The per-sandbox STS session policy: the sandbox may list, read, write and delete only
// under s3://<bucket>/sandboxes/<id>/. A session policy can only narrow the base role, so
// even a wrong policy here cannot grant more than the role the Pulumi package created.
// Kept identical in shape to the Pulumi package's identity component so both sides agree.

export interface SessionPolicy {
  Version: "2012-10-17";
  Statement: {
    Sid: string;
    Effect: "Allow";
    Action: string[];
    Resource: string | string[];
    Condition?: Record<string, Record<string, string | string[]>>;
  }[];
}

export function sandboxPrefix(sandboxId: string): string {
  return `sandboxes/${sandboxId}/`;
}

export function buildSessionPolicy(sandboxId: string, bucket: string): SessionPolicy {
  const prefix = sandboxPrefix(sandboxId);
  return {
    Version: "2012-10-17",
    Statement: [
      {
        Sid: "SandboxObjects",
        Effect: "Allow",
        Action: ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
        Resource: `arn:aws:s3:::${bucket}/${prefix}*`,
      },
      {
        Sid: "SandboxList",
        Effect: "Allow",
        Action: ["s3:ListBucket"],
        Resource: `arn:aws:s3:::${bucket}`,
        Condition: { StringLike: { "s3:prefix": [`${prefix}*`] } },
      },
    ],
  };
}
