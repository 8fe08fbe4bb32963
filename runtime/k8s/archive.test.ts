import { describe, expect, it } from "vitest";
import { helperExclusion } from "./archive.ts";

// getArchive runs `tar -c -C parent -- base`: the member names start with base ("tmp/...") or,
// for /, with "./"; the channel's directory (/tmp/.sbx-helper) is left out only where it is inside.
describe("helperExclusion", () => {
  it.each([
    ["/tmp", "/", "tmp", "tmp/.sbx-helper"],
    ["/", "/", ".", "./tmp/.sbx-helper"],
    ["/workspace", "/", "workspace", undefined],
    ["/tmp/data", "/tmp", "data", undefined],
    ["/tmpfoo", "/", "tmpfoo", undefined],
    ["/tmp/.sbx-helper", "/tmp", ".sbx-helper", undefined],
  ])("archive of %s (tar -C %s %s) excludes %s", (trimmed, parent, base, want) => {
    expect(helperExclusion(trimmed, parent, base)).toBe(want);
  });
});
