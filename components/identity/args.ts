// Arguments of the Identity component (`sbx:identity:Identity`).
import type * as pulumi from "@pulumi/pulumi";

export interface IdentityArgs {
  /** Name prefix for the bucket and roles. Required. */
  prefix: string;
  /** Sandbox outputs expire this many days after upload. Default in config: 30. */
  outputsExpirationDays: number;
  /** The snapshot repository the manager may push to and pull from; unset = no ECR access. */
  snapshotRepositoryArn?: pulumi.Input<string>;
}
