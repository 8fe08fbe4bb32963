// sbx:snapshots:LayerRegistry — the registry paused sandboxes' layers go to when the platform
// runs it (sbx:snapshots.layerRegistry). Objects come from render.ts; the token key only
// derives the registry's upload-signing secret here, and never reaches the registry's pod.
import { createHash } from "node:crypto";
import * as pulumi from "@pulumi/pulumi";
import { createObject } from "../shared/createObject.ts";
import type { LayerRegistryConfig, RegistryTokenConfig } from "../shared/platformConfig.ts";
import { layerRegistryUrl } from "../shared/k8s.ts";
import { layerRegistryConfigYaml, renderLayerRegistry } from "./render.ts";

export interface LayerRegistryArgs {
  provider: pulumi.ProviderResource;
  /** the runtime namespace (the Runtime component creates it: depend on it) */
  namespace: string;
  sandboxNamespace: string;
  config: LayerRegistryConfig;
  token: RegistryTokenConfig & { key: pulumi.Input<string> };
  nodeSelector?: Record<string, string>;
}

export class LayerRegistry extends pulumi.ComponentResource {
  /** snapshots.registry for the runtime: the Service's name (the runtime goes to its pods) */
  readonly url: string;

  constructor(name: string, args: LayerRegistryArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:snapshots:LayerRegistry", name, {}, opts);
    // stable across `up`s, and as secret as the key it comes from
    const configYaml = pulumi.secret(args.token.key).apply((k) =>
      layerRegistryConfigYaml({
        token: args.token,
        httpSecret: createHash("sha256").update(`sbx-layer-registry\n${k}`).digest("hex").slice(0, 32),
      }),
    );
    const objects = renderLayerRegistry({
      namespace: args.namespace,
      sandboxNamespace: args.sandboxNamespace,
      config: args.config,
      token: args.token,
      configYaml,
      nodeSelector: args.nodeSelector,
    });
    for (const o of objects) createObject(name, o, { parent: this, provider: args.provider });
    this.url = layerRegistryUrl(args.namespace);
    this.registerOutputs({ url: this.url });
  }
}
