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
      {
        rulePriority: 1,
        description: "expire untagged images after 7 days",
        selection: { tagStatus: "untagged", countType: "sinceImagePushed", countUnit: "days", countNumber: 7 },
        action: { type: "expire" },
      },
      {
        rulePriority: 2,
        description: `keep the newest ${keepTagged} images`,
        selection: { tagStatus: "any", countType: "imageCountMoreThan", countNumber: keepTagged },
        action: { type: "expire" },
      },
    ],
  };
}

/**
 * Snapshots. The runtime deletes each snapshot's manifest when it is consumed (resume) or its
 * sandbox goes (kill, retention), and ECR then frees the layers no image references, so storage
 * follows the live snapshots without a collector of ours. These rules catch what the runtime
 * cannot delete: an untagged image (a push that never got its tag) goes after a day, and any
 * snapshot one day past the retention (its record was lost, e.g. a crash between deleting a
 * sandbox and its snapshot). The day of slack lets the runtime's hourly expiry, which also
 * deletes the paused sandbox, go first; ECR evaluates rules within a day, so this is a bound.
 */
export function snapshotLifecyclePolicy(retentionDays: number): Record<string, unknown> {
  return {
    rules: [
      {
        rulePriority: 1,
        description: "expire untagged snapshot images after 1 day",
        selection: { tagStatus: "untagged", countType: "sinceImagePushed", countUnit: "days", countNumber: 1 },
        action: { type: "expire" },
      },
      // ECR requires the tagStatus "any" rule to come last (highest priority number)
      {
        rulePriority: 2,
        description: `expire snapshots ${retentionDays + 1} days after push (retention ${retentionDays} days + 1)`,
        selection: {
          tagStatus: "any",
          countType: "sinceImagePushed",
          countUnit: "days",
          countNumber: retentionDays + 1,
        },
        action: { type: "expire" },
      },
    ],
  };
}
