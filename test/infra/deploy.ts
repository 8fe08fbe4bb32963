// Runs SandboxPlatform under the Pulumi mocks and returns what registered, with each
// resource's options (dependsOn, ignoreChanges) recorded through a transformation.
import type * as pulumi from "@pulumi/pulumi";
import { installMocks, resetCaptured, settle, type Captured } from "./mocks.ts";
import { eksConfig, existingClusterConfig, FIXTURE_BUNDLE } from "./fixtures.ts";

installMocks(); // before any component module loads
const { SandboxPlatform } = await import("../../components/platform/component.ts");

export interface Deployed {
  resources: Captured[];
  opts: Map<string, pulumi.ResourceOptions>;
}

export async function deploy(mode: "eks" | "existing-cluster", raw: Record<string, unknown> = {}): Promise<Deployed> {
  resetCaptured();
  const opts = new Map<string, pulumi.ResourceOptions>();
  const record: pulumi.ResourceTransformation = (a) => {
    opts.set(a.name, a.opts);
    return undefined;
  };
  new SandboxPlatform(
    "sbx",
    {
      config: mode === "eks" ? eksConfig(raw) : existingClusterConfig(raw),
      delivery: { kind: "bundle", bundle: FIXTURE_BUNDLE, nodeImage: "node:20-bookworm-slim" },
      apiTokens: { alice: "a".repeat(32) },
      region: mode === "eks" ? "us-east-1" : undefined,
      kubeconfig: mode === "existing-cluster" ? "apiVersion: v1\nkind: Config\n" : undefined,
    },
    { transformations: [record] },
  );
  return { resources: await settle(), opts };
}
