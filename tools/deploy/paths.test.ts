import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cliVersion, EngineMissingError, locateEngine, providerVersion } from "./paths.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-engine-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("locateEngine", () => {
  it("reads the versions the build script builds", () => {
    expect(cliVersion()).toBe("3.248.0");
    expect(providerVersion()).toMatch(/^4\.\d+\.\d+$/);
  });

  it("names the missing binary and the build command", () => {
    expect(() => locateEngine(dir)).toThrow(EngineMissingError);
    expect(() => locateEngine(dir)).toThrow(
      `${join(dir, "bin/pulumi")} is missing. Build it with \`bash scripts/build-pulumi.sh\``,
    );
  });

  it("requires the provider plugin as well as the CLI", () => {
    mkdirSync(join(dir, "bin"), { recursive: true });
    writeFileSync(join(dir, "bin/pulumi"), "");
    expect(() => locateEngine(dir)).toThrow(`resource-kubernetes-v${providerVersion()}/pulumi-resource-kubernetes`);
  });
});
