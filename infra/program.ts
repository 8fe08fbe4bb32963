// The program body, separate from process wiring so tests run it under Pulumi mocks with a
// fixture bundler: read config, decide how the runtime ships, build the platform.
import * as pulumi from "@pulumi/pulumi";
import { SandboxPlatform } from "../components/platform/component.ts";
import { planSizingWarnings } from "../components/platform/sizing.ts";
import type { RuntimeDelivery } from "../components/runtime/args.ts";
import type { RuntimeBundle } from "../components/runtime/bundle.ts";
import { readStackConfig } from "./config.ts";

export interface ProgramDeps {
  /** bundles the runtime entry; called only when no prebuilt image is configured */
  bundle: () => RuntimeBundle;
}

export function buildProgram(deps: ProgramDeps) {
  const stack = readStackConfig();
  const { config } = stack;
  for (const warning of planSizingWarnings(config)) void pulumi.log.warn(warning);
  const delivery: RuntimeDelivery = config.runtime.image
    ? { kind: "image", image: config.runtime.image }
    : { kind: "bundle", bundle: deps.bundle(), nodeImage: config.runtime.nodeImage };
  if (delivery.kind === "bundle" && delivery.bundle.helperMissing)
    void pulumi.log.warn(
      `the runtime bundle carries no in-sandbox helper, so Kubernetes sandboxes will run every command as its own websocket exec (slow): ${delivery.bundle.helperMissing}`,
    );
  const platform = new SandboxPlatform(config.name, {
    config,
    delivery,
    apiTokens: stack.apiTokens,
    kubeconfig: stack.kubeconfig,
    registryTokenKey: stack.registryTokenKey,
    region: stack.region,
  });
  return {
    mode: platform.mode,
    managerUrl: platform.managerUrl,
    catalog: platform.catalog,
    clusterName: platform.clusterName,
    kubeconfig: platform.kubeconfig,
    outputsBucket: platform.bucketName,
    layersBucket: platform.layerBucketName,
    runtimeSha256: delivery.kind === "bundle" ? delivery.bundle.sha256 : undefined,
  };
}
