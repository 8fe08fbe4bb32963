// sbx:images:ImageProfiles — one scanned, tag-immutable ECR repository per sandbox image
// profile, the profile -> image catalog the runtime reads, and the snapshot registry.
import * as aws from "@pulumi/aws";
import * as pulumi from "@pulumi/pulumi";
import type { ImageProfilesArgs } from "./args.ts";
import {
  profileLifecyclePolicy,
  profileRepositoryName,
  snapshotLifecyclePolicy,
  snapshotRepositoryName,
} from "./plan.ts";

export class ImageProfiles extends pulumi.ComponentResource {
  /** profile -> image reference (ECR URI with the configured tag, unless overridden) */
  readonly catalog: pulumi.Output<Record<string, string>>;
  readonly snapshotRepositoryUrl?: pulumi.Output<string>;
  readonly snapshotRepositoryArn?: pulumi.Output<string>;

  constructor(name: string, args: ImageProfilesArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:images:ImageProfiles", name, {}, opts);
    const entries = args.profiles.map((profile) => {
      const repo = this.repository(
        `${name}-${profile}`,
        profileRepositoryName(args.prefix, profile),
        "IMMUTABLE",
        profileLifecyclePolicy(),
      );
      const image = args.catalogOverrides[profile]
        ? pulumi.output(args.catalogOverrides[profile])
        : pulumi.interpolate`${repo.repositoryUrl}:${args.tag}`;
      return image.apply((uri) => [profile, uri] as const);
    });
    this.catalog = pulumi.all(entries).apply((pairs) => Object.fromEntries(pairs));
    if (args.snapshots.enabled) {
      // snapshot tags are unique per sandbox pause; immutability also stops a replay overwriting one
      const repo = this.repository(
        `${name}-snapshots`,
        snapshotRepositoryName(args.prefix),
        "IMMUTABLE",
        snapshotLifecyclePolicy(args.snapshots.retentionDays),
      );
      this.snapshotRepositoryUrl = repo.repositoryUrl;
      this.snapshotRepositoryArn = repo.arn;
    }
    this.registerOutputs({ catalog: this.catalog, snapshotRepositoryUrl: this.snapshotRepositoryUrl });
  }

  private repository(
    logical: string,
    repoName: string,
    mutability: string,
    lifecycle: Record<string, unknown>,
  ): aws.ecr.Repository {
    const repo = new aws.ecr.Repository(
      logical,
      {
        name: repoName,
        imageTagMutability: mutability,
        imageScanningConfiguration: { scanOnPush: true },
        encryptionConfigurations: [{ encryptionType: "AES256" }],
      },
      { parent: this },
    );
    new aws.ecr.LifecyclePolicy(
      logical,
      { repository: repo.name, policy: JSON.stringify(lifecycle) },
      { parent: this },
    );
    return repo;
  }
}
