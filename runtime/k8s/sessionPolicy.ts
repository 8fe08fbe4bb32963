// The runtime's view of the per-sandbox session policy: exactly the Pulumi identity
// component's pure function (components/identity/sessionPolicy.ts), so the base role the
// package creates and the policy the broker sends can never drift apart. This adapter only
// hands it out as a document (test/infra checks it against the base role) and as the JSON
// STS takes (size-checked there).
import { buildSessionPolicy as buildSessionPolicyJson, sessionPolicyDocument } from "../../components/identity/sessionPolicy.ts";

export interface SessionPolicy {
  Version: string;
  Statement: { Effect: "Allow"; Action: string[]; Resource: string | string[]; Condition?: Record<string, Record<string, string | string[]>> }[];
}

/** The policy document for one sandbox; throws a ValidationError for a bad id or bucket. */
export function buildSessionPolicy(sandboxId: string, bucket: string): SessionPolicy {
  buildSessionPolicyJson(sandboxId, bucket); // validates, including the STS size limit
  return sessionPolicyDocument(sandboxId, bucket) as unknown as SessionPolicy;
}

/** What AssumeRole's `Policy` parameter gets. */
export function sessionPolicyJson(sandboxId: string, bucket: string): string {
  return buildSessionPolicyJson(sandboxId, bucket);
}
