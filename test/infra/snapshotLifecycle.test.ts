// The snapshot ECR repository's lifecycle policy under Pulumi mocks (issue 10 item 8): what
// bounds snapshot storage on AWS, where no garbage collector of ours runs. Untagged images go
// after a day; every snapshot goes one day after the configured retention, so the runtime's
// own expiry (which also deletes the paused sandbox) always acts first.
import { describe, expect, it } from "vitest";
import { deploy } from "./deploy.ts";
import { one } from "./mocks.ts";

const policyOf = async (raw: Record<string, unknown> = {}) => {
  const run = await deploy("eks", raw);
  return JSON.parse(one(run.resources, "aws:ecr/lifecyclePolicy:LifecyclePolicy", "snapshots").inputs.policy);
};

describe("snapshot repository lifecycle", () => {
  it("expires untagged images after a day and any snapshot a day past the retention", async () => {
    expect((await policyOf()).rules).toEqual([
      {
        rulePriority: 1,
        description: "expire untagged snapshot images after 1 day",
        selection: { tagStatus: "untagged", countType: "sinceImagePushed", countUnit: "days", countNumber: 1 },
        action: { type: "expire" },
      },
      {
        rulePriority: 2,
        description: "expire snapshots 8 days after push (retention 7 days + 1)",
        selection: { tagStatus: "any", countType: "sinceImagePushed", countUnit: "days", countNumber: 8 },
        action: { type: "expire" },
      },
    ]);
  });

  it("follows sbx:snapshots.retentionDays, and the catch-all rule comes last as ECR requires", async () => {
    const rules = (await policyOf({ snapshots: { retentionDays: 30 } })).rules as Array<{
      rulePriority: number;
      selection: { tagStatus: string; countNumber: number };
    }>;
    expect(rules.find((r) => r.selection.tagStatus === "any")?.selection.countNumber).toBe(31);
    const last = rules.reduce((a, b) => (b.rulePriority > a.rulePriority ? b : a));
    expect(last.selection.tagStatus).toBe("any");
  });
});
