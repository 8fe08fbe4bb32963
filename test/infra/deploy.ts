// Runs SandboxPlatform under the Pulumi mocks and returns what registered, with each
// resource's options (dependsOn, ignoreChanges) recorded through a transformation.
import * as pulumi from "@pulumi/pulumi";
import { eksConfig, existingClusterConfig, FIXTURE_BUNDLE } from "./fixtures.ts";
import { type Captured, installMocks, resetCaptured, settle } from "./mocks.ts";

installMocks(); // before any component module loads
const { SandboxPlatform } = await import("../../components/platform/component.ts");

export interface Deployed {
  resources: Captured[];
  opts: Map<string, pulumi.ResourceOptions>;
}

/** `secrets`: the secret stack values besides apiTokens and kubeconfig, as the program passes them */
export async function deploy(
  mode: "eks" | "existing-cluster",
  raw: Record<string, unknown> = {},
  secrets: { registryTokenKey?: string } = {},
): Promise<Deployed> {
  resetCaptured();
  const opts = new Map<string, pulumi.ResourceOptions>();
  const record: pulumi.ResourceTransformation = (a) => {
    opts.set(a.name, a.opts);
    return undefined;
  };
  new SandboxPlatform(
    "sbx",
    {
      config: (mode === "eks" ? eksConfig : existingClusterConfig)(
        secrets.registryTokenKey ? { ...raw, registryTokenKey: "(secret)" } : raw,
      ),
      delivery: { kind: "bundle", bundle: FIXTURE_BUNDLE, nodeImage: "node:20-bookworm-slim" },
      apiTokens: { alice: "a".repeat(32) },
      region: mode === "eks" ? "us-east-1" : undefined,
      kubeconfig: mode === "existing-cluster" ? "apiVersion: v1\nkind: Config\n" : undefined,
      registryTokenKey: secrets.registryTokenKey && pulumi.secret(secrets.registryTokenKey),
    },
    { transformations: [record] },
  );
  return { resources: await settle(), opts };
}
