import { describe, expect, it } from "vitest";
import {
  sessionPolicyJson as buildSessionPolicy,
  packedLength,
  SESSION_POLICY_MAX_CHARS,
  sessionPolicyDocument,
} from "../../runtime/k8s/sessionPolicy.ts";

describe("buildSessionPolicy", () => {
  it("scopes objects and listing to sandboxes/<id>/", () => {
    const doc = JSON.parse(buildSessionPolicy("sbx-7f3a", "sbx-prod-outputs-abc"));
    expect(doc.Statement[0].Resource).toBe("arn:aws:s3:::sbx-prod-outputs-abc/sandboxes/sbx-7f3a/*");
    expect(doc.Statement[0].Action).toEqual([
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]);
    expect(doc.Statement[1]).toEqual({
      Effect: "Allow",
      Action: ["s3:ListBucket"],
      Resource: "arn:aws:s3:::sbx-prod-outputs-abc",
      Condition: { StringLike: { "s3:prefix": ["sandboxes/sbx-7f3a/", "sandboxes/sbx-7f3a/*"] } },
    });
    for (const s of doc.Statement) for (const a of s.Action) expect(a).not.toContain("*");
  });

  it("stays under the STS limit for the longest id and bucket name", () => {
    const json = buildSessionPolicy("a".repeat(63), "b".repeat(63));
    expect(packedLength(json)).toBeLessThan(SESSION_POLICY_MAX_CHARS);
    expect(packedLength('{ "a" : 1 }')).toBe(7);
  });

  it.each([
    ["", 'sandboxId: invalid value "": use 1-63 lowercase letters'],
    ["UPPER", 'sandboxId: invalid value "UPPER"'],
    ["a/../b", 'sandboxId: invalid value "a/../b"'],
    ["x*", 'sandboxId: invalid value "x*"'],
    ["a".repeat(64), "use 1-63 lowercase letters"],
    ["-lead", "starting and ending with a letter or digit"],
  ])("rejects sandbox id %j", (id, message) => {
    expect(() => buildSessionPolicy(id, "bucket")).toThrow(message);
  });

  it("rejects a bad bucket name and a custom partition is used", () => {
    expect(() => buildSessionPolicy("ok", "Bad_Bucket")).toThrow('bucket: invalid value "Bad_Bucket"');
    expect(sessionPolicyDocument("ok", "bucket", "aws-cn").Statement[1].Resource).toBe("arn:aws-cn:s3:::bucket");
  });
});

describe("the runtime's session policy (runtime/k8s/sessionPolicy.ts) fits the base role", () => {
  it("asks only for actions and resources the base role grants, scoped to the sandbox, under the size limit", async () => {
    const { buildSessionPolicy: runtimeSessionPolicy } = await import("../../runtime/k8s/sessionPolicy.ts");
    const { baseRolePolicy } = await import("../../components/identity/policies.ts");
    const bucket = "sbx-prod-outputs-abc";
    const base = baseRolePolicy(`arn:aws:s3:::${bucket}`);
    const granted = new Map(
      base.Statement.flatMap((s) => s.Action.map((a) => [a, [s.Resource].flat() as string[]] as const)),
    );
    const session = runtimeSessionPolicy("sbx-7f3a", bucket);
    expect(packedLength(JSON.stringify(session))).toBeLessThan(SESSION_POLICY_MAX_CHARS);
    for (const s of session.Statement) {
      for (const action of s.Action) {
        const resources = granted.get(action);
        expect(resources, action).toBeDefined();
        for (const r of [s.Resource].flat()) {
          // inside the base role's resource (the base object ARN ends in sandboxes/*)
          expect(
            resources!.some((g) => r === g || (g.endsWith("*") && r.startsWith(g.slice(0, -1)))),
            `${action} on ${r}`,
          ).toBe(true);
          if (action !== "s3:ListBucket") expect(r).toContain("/sandboxes/sbx-7f3a/");
        }
      }
    }
  });
});
