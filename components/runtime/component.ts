// sbx:runtime:Runtime — the manager and controller: CRD, RBAC, config, tokens, Deployments,
// Service, PDBs and the manager's Pod Identity association. Objects come from render.ts.
import * as aws from "@pulumi/aws";
import * as pulumi from "@pulumi/pulumi";
import { createObject } from "../shared/createObject.ts";
import type { K8sObject } from "../shared/k8s.ts";
import type { RegistryTokenConfig } from "../shared/platformConfig.ts";
import type { RuntimeArgs } from "./args.ts";
import { buildRuntimeConfig, checkTokenKey, hashTokens, sha256Hex } from "./config.ts";
import {
  NAMES,
  type RuntimeRenderInput,
  renderConfigObjects,
  renderCrd,
  renderDeployment,
  renderNamespace,
  renderPdb,
  renderRbac,
  renderService,
} from "./render.ts";

export class Runtime extends pulumi.ComponentResource {
  readonly namespace: string;
  /** in-cluster URL of the manager's HTTP API */
  readonly managerUrl: string;
  readonly configJson: pulumi.Output<string>;
  /** the runtime namespace object: what else deploys into that namespace depends on it */
  readonly namespaceObject: pulumi.Resource;

  // Over 60 lines on purpose: creates the objects render.ts returns, in dependency order.
  constructor(name: string, args: RuntimeArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:runtime:Runtime", name, {}, opts);
    validateEarly(args);
    // the stack reader checks the secret it reads (infra/config.ts); a plain key is checked here
    if (typeof args.snapshots?.registryToken?.key === "string")
      checkTokenKey(args.snapshots.registryToken.key, args.snapshots.registryToken.certificate);
    const k8sOpts = (dependsOn: pulumi.Resource[] = []): pulumi.CustomResourceOptions => ({
      parent: this,
      provider: args.provider,
      dependsOn,
    });
    const make = (obj: K8sObject, deps: pulumi.Resource[] = []) => createObject(name, obj, k8sOpts(deps));

    const token = args.snapshots?.registryToken;
    // the key stays out of config.json's inputs, or the whole config would turn secret
    const snapshots = args.snapshots && {
      ...args.snapshots,
      registryToken: token && publicHalf(token),
    };
    this.configJson = pulumi
      .all([args.catalog, args.credentials ?? null, snapshots ?? null, args.clusterIssuer?.issuer ?? null])
      .apply(([catalog, credentials, snapshots, clusterIssuer]) =>
        JSON.stringify(
          buildRuntimeConfig({
            settings: args.settings,
            namespace: args.namespace,
            sandboxNamespace: args.sandboxNamespace,
            catalog,
            credentials: credentials ?? undefined,
            snapshots: snapshots ?? undefined,
            clusterIssuer:
              args.clusterIssuer && clusterIssuer ? { ...args.clusterIssuer, issuer: clusterIssuer } : undefined,
          }),
          null,
          2,
        ),
      );
    const input: RuntimeRenderInput<pulumi.Input<string>> = {
      namespace: args.namespace,
      sandboxNamespace: args.sandboxNamespace,
      delivery: args.delivery,
      managerReplicas: args.managerReplicas,
      controllerReplicas: args.controllerReplicas,
      resources: args.resources,
      nodeSelector: args.nodeSelector,
      registryToken: token && { keyPem: pulumi.secret(token.key), certPem: token.certificate },
      configJson: this.configJson,
      catalogJson: pulumi.output(args.catalog).apply((c) => JSON.stringify(c, null, 2)),
      tokensJson: pulumi.secret(pulumi.output(args.apiTokens ?? {}).apply((t) => JSON.stringify(hashTokens(t)))),
      // a new token certificate rolls the pods too (its key comes with it)
      configSha: this.configJson.apply((c) => sha256Hex(token ? `${c}\n${token.certificate}` : c)),
    };

    const ns = make(renderNamespace(args.namespace));
    this.namespaceObject = ns;
    const crd = make(renderCrd());
    const rbac = renderRbac(args.namespace, args.sandboxNamespace).map((o) => make(o, [ns]));
    const config = renderConfigObjects(input).map((o) => make(o, [ns]));
    const ready: pulumi.Resource[] = [crd, ...rbac, ...config];
    if (args.podIdentity) {
      // the controller runs the same code; whichever pod leads the Lease pauses (pushes
      // snapshots) and mints credentials on resume, so both service accounts get the role
      for (const role of ["manager", "controller"] as const) {
        ready.push(
          new aws.eks.PodIdentityAssociation(
            `${name}-${role}`,
            {
              clusterName: args.podIdentity.clusterName,
              namespace: args.namespace,
              serviceAccount: NAMES[role],
              roleArn: args.podIdentity.roleArn,
            },
            { parent: this },
          ),
        );
      }
    }
    make(renderDeployment(input, "manager"), ready);
    make(renderDeployment(input, "controller"), ready);
    make(renderService(args.namespace), [ns]);
    make(renderPdb(args.namespace, "manager", args.managerReplicas), [ns]);
    make(renderPdb(args.namespace, "controller", args.controllerReplicas), [ns]);

    this.namespace = args.namespace;
    this.managerUrl = `http://${NAMES.manager}.${args.namespace}.svc.cluster.local`;
    this.registerOutputs({ namespace: this.namespace, managerUrl: this.managerUrl });
  }
}

/** Build config.json with placeholders for AWS outputs so a bad config fails before any resource. */
function validateEarly(args: RuntimeArgs): void {
  buildRuntimeConfig({
    settings: args.settings,
    namespace: args.namespace,
    sandboxNamespace: args.sandboxNamespace,
    catalog: {},
    credentials: args.credentials
      ? {
          baseRoleArn: "arn:aws:iam::000000000000:role/placeholder",
          bucket: "placeholder",
          region: "placeholder",
          durationSeconds: args.credentials.durationSeconds,
        }
      : undefined,
    snapshots: args.snapshots
      ? {
          repositoryUrl: args.snapshots.inCluster
            ? "http://placeholder.placeholder.svc:5000/placeholder"
            : "registry.invalid/placeholder",
          retentionDays: args.snapshots.retentionDays,
          podRegistry: args.snapshots.podRegistry,
          inCluster: args.snapshots.inCluster,
          registryToken: args.snapshots.registryToken && publicHalf(args.snapshots.registryToken),
        }
      : undefined,
    clusterIssuer: args.clusterIssuer && {
      ...args.clusterIssuer,
      // a known issuer is checked as given; an Output (EKS's URL) as a placeholder of its shape
      issuer:
        typeof args.clusterIssuer.issuer === "string"
          ? args.clusterIssuer.issuer
          : "https://oidc.eks.placeholder.amazonaws.com/id/PLACEHOLDER",
    },
  });
}

function publicHalf(t: RegistryTokenConfig): RegistryTokenConfig {
  return { certificate: t.certificate, issuer: t.issuer, service: t.service, ttlSeconds: t.ttlSeconds };
}
