// A private S3 bucket as every bucket of the platform is made: public access blocked, owner
// enforced, SSE-S3 by default, and the lifecycle rules the caller gives. Logical names are
// `<name>` for each part, so a caller keeps the URNs it had when it built these itself.
import * as aws from "@pulumi/aws";
import type * as pulumi from "@pulumi/pulumi";

/** Parts of a multipart upload nobody completed (a crash mid-upload) go after a day. */
export const ABORT_INCOMPLETE_UPLOADS: aws.types.input.s3.BucketLifecycleConfigurationRule = {
  id: "abort-incomplete-uploads",
  status: "Enabled",
  filter: { prefix: "" },
  abortIncompleteMultipartUpload: { daysAfterInitiation: 1 },
};

export function privateBucket(
  name: string,
  bucketPrefix: string,
  rules: aws.types.input.s3.BucketLifecycleConfigurationRule[],
  opts: pulumi.CustomResourceOptions,
): aws.s3.Bucket {
  const bucket = new aws.s3.Bucket(name, { bucketPrefix }, opts);
  new aws.s3.BucketPublicAccessBlock(
    name,
    {
      bucket: bucket.id,
      blockPublicAcls: true,
      blockPublicPolicy: true,
      ignorePublicAcls: true,
      restrictPublicBuckets: true,
    },
    opts,
  );
  new aws.s3.BucketOwnershipControls(
    name,
    { bucket: bucket.id, rule: { objectOwnership: "BucketOwnerEnforced" } },
    opts,
  );
  new aws.s3.BucketServerSideEncryptionConfiguration(
    name,
    {
      bucket: bucket.id,
      rules: [{ applyServerSideEncryptionByDefault: { sseAlgorithm: "AES256" }, bucketKeyEnabled: true }],
    },
    opts,
  );
  new aws.s3.BucketLifecycleConfiguration(name, { bucket: bucket.id, rules }, opts);
  return bucket;
}
