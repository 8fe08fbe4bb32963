// Arguments of the ImageProfiles component (`sbx:images:ImageProfiles`).
export interface ImageProfilesArgs {
  /** Repository name prefix, e.g. the platform name "sbx". Required. */
  prefix: string;
  /** One ECR repository per profile. Default in config: base, data, web, ml, rl. */
  profiles: string[];
  /** Tag the catalog points at (repositories are tag-immutable). Default in config: "v1". */
  tag: string;
  /** profile -> image overrides that win over the ECR URI (e.g. a public image). Default: {}. */
  catalogOverrides: Record<string, string>;
  /** Snapshot registry; `enabled` default true, `retentionDays` default 7. */
  snapshots: { enabled: boolean; retentionDays: number };
}
