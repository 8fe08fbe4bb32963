// Arguments of the SandboxPlatform component (`sbx:platform:SandboxPlatform`).
import type * as pulumi from "@pulumi/pulumi";
import type { RuntimeDelivery } from "../runtime/args.ts";
import type { PlatformConfig } from "../shared/platformConfig.ts";

export interface SandboxPlatformArgs {
  /** The validated stack config (infra/schema.ts). Every default is documented in docs/stack-config.md. */
  config: PlatformConfig;
  /** How the runtime code ships: the esbuild bundle on a Node image, or a prebuilt image. */
  delivery: RuntimeDelivery;
  /** owner -> plaintext API token (secret). Hashed before it reaches the cluster. Default: {}. */
  apiTokens?: pulumi.Input<Record<string, string>>;
  /** with snapshots.registryToken: the PEM private key of its certificate (secret). */
  registryTokenKey?: pulumi.Input<string>;
  /** existing-cluster mode only: kubeconfig contents (secret). */
  kubeconfig?: pulumi.Input<string>;
  /** eks mode only: AWS region the runtime's credential broker calls STS in. */
  region?: string;
}
