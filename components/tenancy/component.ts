// sbx:tenancy:Tenancy — the sandbox namespace and its guard rails (see plan.ts).
import * as pulumi from "@pulumi/pulumi";
import { createObject } from "../shared/createObject.ts";
import type { TenancyArgs } from "./args.ts";
import { renderTenancy } from "./plan.ts";

export class Tenancy extends pulumi.ComponentResource {
  readonly namespace: string;
  readonly resources: pulumi.CustomResource[];

  constructor(name: string, args: TenancyArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:tenancy:Tenancy", name, {}, opts);
    const [nsObj, ...rest] = renderTenancy(args); // throws on bad sizing before any resource
    const ns = createObject(name, nsObj, { parent: this, provider: args.provider });
    this.resources = [
      ns,
      ...rest.map((o) => createObject(name, o, { parent: this, provider: args.provider, dependsOn: [ns] })),
    ];
    this.namespace = args.namespace;
    this.registerOutputs({ namespace: this.namespace });
  }
}
