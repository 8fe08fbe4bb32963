// Tenant paths reach these helpers on every download (Kubernetes) and on every missing-path
// answer (both platforms): they must cost time linear in the path.
import { describe, expect, it } from "vitest";
import { downloadCheckError, PATH_MISSING_EXIT, withoutTrailingSlashes } from "./downloadCheck.ts";

describe("withoutTrailingSlashes", () => {
  it.each([
    ["/workspace/", "/workspace"],
    ["/workspace///", "/workspace"],
    ["/workspace", "/workspace"],
    ["/", ""],
    ["///", ""],
    ["", ""],
    ["/a//b/", "/a//b"],
  ])("%j -> %j", (p, want) => expect(withoutTrailingSlashes(p)).toBe(want));

  it("is linear on a run of slashes (/\\/+$/ took seconds on 64 KiB of them)", () => {
    const hostile = `${"/".repeat(65_536)}x`;
    const started = performance.now();
    expect(withoutTrailingSlashes(hostile)).toBe(hostile);
    // the missing-path answer names the parent directory through the same helper
    expect(downloadCheckError(PATH_MISSING_EXIT, "", hostile)?.message.endsWith(`ls -la ${"/".repeat(65_535)}`)).toBe(
      true,
    );
    // generous: a pass over 64 KiB is well under a millisecond; the quadratic pattern needs seconds
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
