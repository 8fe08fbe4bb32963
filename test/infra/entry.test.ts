// Pulumi.yaml and infra/index.ts as the CLI would use them: the project file points at an
// entry that exists and loads through tsx, and the entry (bundling the real runtime/main.ts)
// builds the prod stack under mocks.
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import * as pulumi from "@pulumi/pulumi";
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { installMocks, one, settle, unwrap } from "./mocks.ts";
import { stackRaw } from "./stacks.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));

describe("Pulumi.yaml", () => {
  const project = yaml.load(readFileSync(`${root}Pulumi.yaml`, "utf8")) as any;

  it("names the project sbx (config keys are sbx:*) and runs infra/index.ts through tsx", () => {
    expect(project.name).toBe("sbx");
    expect(project.runtime).toEqual({ name: "nodejs", options: { typescript: false, nodeargs: "--import=tsx" } });
    expect(existsSync(`${root}${project.main}`)).toBe(true);
    expect(existsSync(`${root}${project.stackConfigDir}/Pulumi.prod.yaml`)).toBe(true);
    expect(() => createRequire(`${root}package.json`).resolve("tsx")).not.toThrow();
  });

  it("the policy pack is a loadable project too", () => {
    const pack = yaml.load(readFileSync(`${root}policy/PulumiPolicy.yaml`, "utf8")) as any;
    expect(pack.runtime.options.nodeargs).toBe("--import=tsx");
    const pkg = JSON.parse(readFileSync(`${root}policy/package.json`, "utf8"));
    expect(pkg.version).toMatch(/^\d+\.\d+\.\d+$/); // PolicyPack refuses to start without it
    expect(existsSync(`${root}policy/${pkg.main}`)).toBe(true);
  });
});

describe("infra/index.ts", () => {
  it("bundles the real runtime and builds the prod stack", async () => {
    installMocks("sbx", "prod");
    const all: Record<string, string> = { "aws:region": "us-east-1" };
    for (const [k, v] of Object.entries(stackRaw("prod")))
      all[`sbx:${k}`] = typeof v === "string" ? v : JSON.stringify(v);
    pulumi.runtime.setAllConfig(all);
    const entry = await import("../../infra/index.ts");
    const resources = await settle();
    const sha = await unwrap(entry.runtimeSha256);
    expect(sha).toMatch(/^[0-9a-f]{64}$/);
    const manager = one(resources, "kubernetes:apps/v1:Deployment", "sbx-manager");
    expect(manager.inputs.spec.template.metadata.annotations["sbx.dev/runtime-sha256"]).toBe(sha);
    expect(await unwrap(entry.managerUrl)).toBe("http://sbx-manager.sbx-system.svc.cluster.local");
    expect(await unwrap(entry.clusterName)).toBe("sbx-prod");
  }, 60_000);
});
