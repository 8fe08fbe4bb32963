// The sbx policy pack: `pulumi preview --policy-pack policy`.
import { PolicyPack } from "@pulumi/policy";
import { resourcePolicies, stackPolicies } from "./rules.ts";

new PolicyPack("sbx-security", { policies: [...resourcePolicies, ...stackPolicies] });
