// Pulumi mocks for the platform tests: every registered resource is captured with its type,
// name and inputs. Import this module (and call installMocks) BEFORE importing components.
import * as pulumi from "@pulumi/pulumi";

export interface Captured {
  type: string;
  name: string;
  /** inputs with secrets unwrapped */
  inputs: Record<string, any>;
  /** inputs as sent, secrets still marked */
  raw: Record<string, any>;
  custom: boolean;
}

export const ACCOUNT = "123456789012";
export const REGION = "us-east-1";
/** the OIDC issuer the mocked EKS cluster reports */
export const EKS_OIDC_ISSUER = `https://oidc.eks.${REGION}.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE`;

const captured: Captured[] = [];

// How the SDK marks a secret value on the wire; tests read through it.
const SECRET_SIG = "4dabf18193072939515e22adb298388d";
const SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270";

export function isSecret(v: any): boolean {
  return !!v && typeof v === "object" && v[SECRET_SIG] === SECRET_VALUE;
}

export function unsecret(v: any): any {
  if (Array.isArray(v)) return v.map(unsecret);
  if (v && typeof v === "object") {
    if (v[SECRET_SIG] === SECRET_VALUE) return unsecret(v.value);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unsecret(x)]));
  }
  return v;
}

function outputsFor(type: string, name: string, inputs: Record<string, any>): Record<string, any> {
  switch (type) {
    case "eks:index:Cluster":
      return {
        ...inputs,
        kubeconfigJson: JSON.stringify({ apiVersion: "v1", kind: "Config", clusters: [{ name: inputs.name }] }),
        eksCluster: { name: inputs.name, identities: [{ oidcs: [{ issuer: EKS_OIDC_ISSUER }] }] },
      };
    case "aws:ecr/repository:Repository":
      return {
        ...inputs,
        repositoryUrl: `${ACCOUNT}.dkr.ecr.${REGION}.amazonaws.com/${inputs.name}`,
        arn: `arn:aws:ecr:${REGION}:${ACCOUNT}:repository/${inputs.name}`,
      };
    case "aws:iam/role:Role":
      return { ...inputs, name: `${name}-role`, arn: `arn:aws:iam::${ACCOUNT}:role/${name}` };
    case "aws:s3/bucket:Bucket":
      return {
        ...inputs,
        bucket: `${inputs.bucketPrefix ?? name}abc123`,
        arn: `arn:aws:s3:::${inputs.bucketPrefix ?? name}abc123`,
      };
    case "aws:ec2/launchTemplate:LaunchTemplate":
      return { ...inputs, latestVersion: 1 };
    default:
      return { ...inputs };
  }
}

export function installMocks(project = "sbx", stack = "test"): void {
  pulumi.runtime.setMocks(
    {
      newResource(args: pulumi.runtime.MockResourceArgs) {
        captured.push({
          type: args.type,
          name: args.name,
          inputs: unsecret(args.inputs),
          raw: args.inputs,
          custom: args.custom ?? true,
        });
        return { id: `${args.name}-id`, state: outputsFor(args.type, args.name, args.inputs) };
      },
      call(args: pulumi.runtime.MockCallArgs) {
        if (args.token === "aws:index/getAvailabilityZones:getAvailabilityZones") {
          return { names: ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"], zoneIds: [] };
        }
        return { ...args.inputs };
      },
    },
    project,
    stack,
    false,
  );
}

export function resetCaptured(): void {
  captured.length = 0;
}

/**
 * Resolves once no resource has registered for `windows` consecutive `quietMs` windows: all
 * async registrations landed. Several windows, so a busy machine's pause can't end it early.
 */
export async function settle(quietMs = 100, windows = 3): Promise<Captured[]> {
  let last = -1;
  let quiet = 0;
  while (quiet < windows) {
    await new Promise((r) => setTimeout(r, quietMs));
    quiet = captured.length === last ? quiet + 1 : 0;
    last = captured.length;
  }
  return [...captured];
}

export function ofType(resources: Captured[], type: string): Captured[] {
  return resources.filter((r) => r.type === type);
}

export function one(resources: Captured[], type: string, nameIncludes: string): Captured {
  const found = resources.filter((r) => r.type === type && r.name.includes(nameIncludes));
  if (found.length !== 1)
    throw new Error(
      `expected one ${type} named *${nameIncludes}*, found ${found.map((r) => r.name).join(", ") || "none"}`,
    );
  return found[0];
}

export function countByType(resources: Captured[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of resources) out[r.type] = (out[r.type] ?? 0) + 1;
  return Object.fromEntries(Object.entries(out).sort());
}

export function unwrap<T>(o: pulumi.Output<T> | T): Promise<T> {
  return pulumi.Output.isInstance(o)
    ? new Promise((resolve) =>
        (o as pulumi.Output<T>).apply((v) => {
          resolve(v);
          return v;
        }),
      )
    : Promise.resolve(o as T);
}
