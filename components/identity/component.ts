// sbx:identity:Identity — the sandbox outputs bucket, the one base role scoped to
// `sandboxes/*`, and the manager's Pod Identity role that assumes it per sandbox.
import * as aws from "@pulumi/aws";
import * as pulumi from "@pulumi/pulumi";
import { ABORT_INCOMPLETE_UPLOADS, privateBucket } from "../shared/bucket.ts";
import type { IdentityArgs } from "./args.ts";
import { baseRolePolicy, baseRoleTrustPolicy, managerPolicy, managerTrustPolicy, SANDBOX_PREFIX } from "./policies.ts";

export class Identity extends pulumi.ComponentResource {
  readonly bucketName: pulumi.Output<string>;
  readonly baseRoleArn: pulumi.Output<string>;
  readonly managerRoleArn: pulumi.Output<string>;

  constructor(name: string, args: IdentityArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:identity:Identity", name, {}, opts);
    const parent = { parent: this };
    const bucket = privateBucket(
      `${name}-outputs`,
      `${args.prefix}-outputs-`,
      [
        {
          id: "expire-sandbox-outputs",
          status: "Enabled",
          filter: { prefix: `${SANDBOX_PREFIX}/` },
          expiration: { days: args.outputsExpirationDays },
        },
        ABORT_INCOMPLETE_UPLOADS,
      ],
      parent,
    );

    const manager = new aws.iam.Role(
      `${name}-manager`,
      { namePrefix: `${args.prefix}-manager-`, assumeRolePolicy: JSON.stringify(managerTrustPolicy()) },
      parent,
    );
    const base = new aws.iam.Role(
      `${name}-sandbox-base`,
      {
        namePrefix: `${args.prefix}-sandbox-`,
        assumeRolePolicy: manager.arn.apply((arn) => JSON.stringify(baseRoleTrustPolicy(arn))),
        // role chaining (Pod Identity session -> this role) caps sessions at 1 hour regardless
        maxSessionDuration: 3600,
      },
      parent,
    );
    new aws.iam.RolePolicy(
      `${name}-sandbox-base`,
      { role: base.id, policy: bucket.arn.apply((arn) => JSON.stringify(baseRolePolicy(arn))) },
      parent,
    );
    new aws.iam.RolePolicy(
      `${name}-manager`,
      {
        role: manager.id,
        policy: pulumi
          .all([base.arn, args.snapshotRepositoryArn])
          .apply(([baseArn, repoArn]) => JSON.stringify(managerPolicy(baseArn, repoArn))),
      },
      parent,
    );

    this.bucketName = bucket.bucket;
    this.baseRoleArn = base.arn;
    this.managerRoleArn = manager.arn;
    this.registerOutputs({
      bucketName: this.bucketName,
      baseRoleArn: this.baseRoleArn,
      managerRoleArn: this.managerRoleArn,
    });
  }
}
