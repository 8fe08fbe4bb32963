// Validated configs and a fixture bundle for the platform tests.

import { packBundle } from "../../components/runtime/bundle.ts";
import type { PlatformConfig } from "../../components/shared/platformConfig.ts";
import { validatePlatformConfig } from "../../infra/schema.ts";

export const FIXTURE_BUNDLE = packBundle("console.log('sbx fixture runtime');");

export function eksConfig(raw: Record<string, unknown> = {}): PlatformConfig {
  return validatePlatformConfig({
    name: "sbx-test",
    cluster: { admins: ["arn:aws:iam::123456789012:role/Admin"] },
    nodeGroups: {
      sandbox: [{ instanceType: "m7i.xlarge", minSize: 1, maxSize: 30 }],
      gpu: { instanceType: "g5.xlarge" },
    },
    budget: { cpu: "250", memory: "500Gi" },
    egress: [
      { cidr: "0.0.0.0/0", ports: [443] },
      { namespace: "tools", podLabels: { app: "tool-gateway" }, ports: [8080] },
    ],
    ...raw,
  });
}

export function existingClusterConfig(raw: Record<string, unknown> = {}): PlatformConfig {
  return validatePlatformConfig({
    mode: "existing-cluster",
    kubeconfig: "(secret)",
    images: { profiles: ["base"], catalog: { base: "python:3.12-slim" } },
    ...raw,
  });
}
