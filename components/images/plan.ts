// ECR repository names and lifecycle rules for image profiles and snapshots. Pure.
export function profileRepositoryName(prefix: string, profile: string): string {
  return `${prefix}/sandbox-${profile}`;
}

export function snapshotRepositoryName(prefix: string): string {
  return `${prefix}/snapshots`;
}

/** Profiles: drop untagged layers after a week, keep the newest 20 tagged images. */
export function profileLifecyclePolicy(keepTagged = 20): Record<string, unknown> {
  return {
    rules: [
      { rulePriority: 1, description: "expire untagged images after 7 days", selection: { tagStatus: "untagged", countType: "sinceImagePushed", countUnit: "days", countNumber: 7 }, action: { type: "expire" } },
      { rulePriority: 2, description: `keep the newest ${keepTagged} images`, selection: { tagStatus: "any", countType: "imageCountMoreThan", countNumber: keepTagged }, action: { type: "expire" } },
    ],
  };
}

/** Snapshots expire a fixed number of days after they were pushed. */
export function snapshotLifecyclePolicy(retentionDays: number): Record<string, unknown> {
  return {
    rules: [
      { rulePriority: 1, description: `expire snapshots after ${retentionDays} days`, selection: { tagStatus: "any", countType: "sinceImagePushed", countUnit: "days", countNumber: retentionDays }, action: { type: "expire" } },
    ],
  };
}
