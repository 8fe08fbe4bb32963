import { describe, expect, it } from "vitest";
import { policyPacksInOutput } from "./policyReport.ts";

describe("policyPacksInOutput", () => {
  it("reads the packs of the Policies block, passed or failed", () => {
    const out = [
      "Previewing update (deploy-test):",
      "Policies:",
      "    ✅ sbx-security@v0.1.0 (local: /work/main/policy)",
      "    ❌ other-pack@v1.2.3-rc.1 (local: /tmp/p)",
      "",
      "Resources:",
      "    28 unchanged",
    ].join("\n");
    expect(policyPacksInOutput(out)).toEqual({ "sbx-security": "0.1.0", "other-pack": "1.2.3-rc.1" });
  });

  it("finds none when no pack ran", () => {
    expect(policyPacksInOutput("Resources:\n    28 unchanged\n")).toEqual({});
  });

  it("ignores name@version text outside the block", () => {
    expect(policyPacksInOutput("    x sbx-security@v0.1.0 (local: /p)\nPolicies:\n\nOutputs:\n")).toEqual({});
  });
});
