// Optional parts of the eks platform switch off cleanly: no pre-pull, no snapshots, no
// public endpoint, an existing VPC.
import { beforeAll, describe, expect, it } from "vitest";
import { type Deployed, deploy } from "./deploy.ts";
import { countByType, ofType, one } from "./mocks.ts";

let lean: Deployed;
beforeAll(async () => {
  lean = await deploy("eks", {
    prePullImages: false,
    snapshots: { enabled: false },
    cluster: { admins: [], endpointPublicAccess: false },
    network: {
      mode: "existing",
      vpcId: "vpc-0123456789abcdef0",
      cidr: "172.16.0.0/16",
      privateSubnetIds: ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    },
    nodeGroups: { sandbox: [{ minSize: 1, maxSize: 5 }] },
    blockedCidrs: ["100.64.0.0/10"],
  });
});

describe("eks platform with optional parts off", () => {
  it("creates no VPC, no pre-pull DaemonSet, no snapshot repository and no GPU group", () => {
    const counts = countByType(lean.resources);
    expect(counts["aws:ec2/vpc:Vpc"]).toBeUndefined();
    expect(counts["aws:ec2/subnet:Subnet"]).toBeUndefined();
    expect(counts["kubernetes:apps/v1:DaemonSet"]).toBeUndefined();
    expect(counts["aws:ecr/repository:Repository"]).toBe(5);
    expect(counts["aws:eks/nodeGroup:NodeGroup"]).toBe(2);
  });

  it("the cluster has a private endpoint only, no access entries, and the given subnets", () => {
    const c = ofType(lean.resources, "eks:index:Cluster")[0].inputs;
    expect(c).toMatchObject({
      endpointPublicAccess: false,
      endpointPrivateAccess: true,
      vpcId: "vpc-0123456789abcdef0",
      privateSubnetIds: ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    });
    expect(c.publicAccessCidrs).toBeUndefined();
    expect(c.accessEntries).toEqual({});
    expect(one(lean.resources, "aws:eks/nodeGroup:NodeGroup", "-sandbox").inputs.subnetIds).toEqual([
      "subnet-0123456789abcdef0",
      "subnet-0123456789abcdef1",
    ]);
  });

  it("the manager gets no registry permissions and the runtime no snapshot config", () => {
    const policy = JSON.parse(one(lean.resources, "aws:iam/rolePolicy:RolePolicy", "identity-manager").inputs.policy);
    expect(policy.Statement.map((s: any) => s.Sid)).toEqual(["AssumeBaseRole"]);
    const cfg = JSON.parse(
      one(lean.resources, "kubernetes:core/v1:ConfigMap", "sbx-config").inputs.data["config.json"],
    );
    expect(cfg.snapshots).toBeUndefined();
    expect(cfg.credentials.bucket).toBe("sbx-test-outputs-abc123");
  });

  it("egress excepts carry the existing VPC CIDR and the configured blocked ranges", () => {
    const np = one(lean.resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy", "allow-egress");
    expect(np.inputs.spec.egress[0].to[0].ipBlock).toEqual({
      cidr: "0.0.0.0/0",
      except: ["169.254.169.254/32", "169.254.170.23/32", "172.16.0.0/16", "100.64.0.0/10"],
    });
  });
});
