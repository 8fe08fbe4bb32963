// sbx:snapshots:LayerRegistry — the registry paused sandboxes' layers go to when the platform
// runs it (sbx:snapshots.layerRegistry). Objects come from render.ts; the token key only
// derives the registry's upload-signing secret here, and never reaches the registry's pod.
// With S3 storage (eks mode) it also makes the bucket, a role for the registry's service
// account that reaches that bucket alone, and the Pod Identity association.
import { createHash } from "node:crypto";
import * as aws from "@pulumi/aws";
import * as pulumi from "@pulumi/pulumi";
import { layerRegistryPolicy, managerTrustPolicy } from "../identity/policies.ts";
import { ABORT_INCOMPLETE_UPLOADS, privateBucket } from "../shared/bucket.ts";
import { createObject } from "../shared/createObject.ts";
import { LAYER_REGISTRY, layerRegistryUrl } from "../shared/k8s.ts";
import type { LayerRegistryConfig, RegistryTokenConfig } from "../shared/platformConfig.ts";
import { layerRegistryConfigYaml, renderLayerRegistry } from "./render.ts";

export interface LayerRegistryArgs {
  provider: pulumi.ProviderResource;
  /** the runtime namespace (the Runtime component creates it: depend on it) */
  namespace: string;
  sandboxNamespace: string;
  config: LayerRegistryConfig;
  token: RegistryTokenConfig & { key: pulumi.Input<string> };
  nodeSelector?: Record<string, string>;
  /** storage kind s3: where the bucket goes and the cluster whose Pod Identity reaches it */
  aws?: { prefix: string; region: string; clusterName: pulumi.Input<string> };
}

export class LayerRegistry extends pulumi.ComponentResource {
  /** snapshots.registry for the runtime: the Service's name (the runtime goes to its pods) */
  readonly url: string;
  readonly bucketName?: pulumi.Output<string>;

  // Over 60 lines on purpose: creates the objects render.ts returns and, with S3, the bucket and role they need.
  constructor(name: string, args: LayerRegistryArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:snapshots:LayerRegistry", name, {}, opts);
    const parent = { parent: this };
    let s3: pulumi.Output<{ bucket: string; region: string }> | undefined;
    const deps: pulumi.Resource[] = [];
    if (args.config.storage.kind === "s3") {
      if (!args.aws) throw new Error("LayerRegistry: s3 storage needs args.aws (eks mode)");
      const { region, prefix, clusterName } = args.aws;
      const bucket = privateBucket(
        `${name}-layers`,
        `${prefix}-layers-`,
        // an upload a pod abandoned mid-pause leaves parts behind until this
        [ABORT_INCOMPLETE_UPLOADS],
        parent,
      );
      const role = new aws.iam.Role(
        `${name}-registry`,
        { namePrefix: `${prefix}-layers-`, assumeRolePolicy: JSON.stringify(managerTrustPolicy()) },
        parent,
      );
      new aws.iam.RolePolicy(
        `${name}-registry`,
        { role: role.id, policy: bucket.arn.apply((arn) => JSON.stringify(layerRegistryPolicy(arn))) },
        parent,
      );
      deps.push(
        new aws.eks.PodIdentityAssociation(
          `${name}-registry`,
          { clusterName, namespace: args.namespace, serviceAccount: LAYER_REGISTRY.name, roleArn: role.arn },
          parent,
        ),
      );
      this.bucketName = bucket.bucket;
      s3 = bucket.bucket.apply((b) => ({ bucket: b, region }));
    }
    // stable across `up`s, and as secret as the key it comes from
    const configYaml = pulumi.all([pulumi.secret(args.token.key), s3 ?? null]).apply(([k, store]) =>
      layerRegistryConfigYaml({
        token: args.token,
        httpSecret: createHash("sha256").update(`sbx-layer-registry\n${k}`).digest("hex").slice(0, 32),
        ...(store ? { s3: store } : {}),
      }),
    );
    const objects = renderLayerRegistry({
      namespace: args.namespace,
      sandboxNamespace: args.sandboxNamespace,
      config: args.config,
      token: args.token,
      configYaml,
      nodeSelector: args.nodeSelector,
      ...(s3 && args.aws ? { s3Region: args.aws.region } : {}),
    });
    // the pod starts with its AWS identity in place (Pod Identity injects it at admission)
    for (const o of objects)
      createObject(name, o, {
        parent: this,
        provider: args.provider,
        ...(o.kind === "Deployment" ? { dependsOn: deps } : {}),
      });
    this.url = layerRegistryUrl(args.namespace);
    this.registerOutputs({ url: this.url, bucketName: this.bucketName });
  }
}
