// sbx:network:Network — a VPC for the cluster, or an existing one passed through.
import * as aws from "@pulumi/aws";
import * as pulumi from "@pulumi/pulumi";
import type { NetworkArgs } from "./args.ts";
import { planSubnets, type SubnetPlan } from "./plan.ts";

export class Network extends pulumi.ComponentResource {
  readonly vpcId: pulumi.Output<string>;
  readonly vpcCidr: string;
  readonly privateSubnetIds: pulumi.Output<string[]>;
  readonly publicSubnetIds: pulumi.Output<string[]>;

  // Over 60 lines on purpose: creates the VPC plan.ts planned: gateway, route tables, subnets, each one declaration.
  constructor(name: string, args: NetworkArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sbx:network:Network", name, {}, opts);
    const n = args.network;
    this.vpcCidr = n.cidr;
    if (n.mode === "existing") {
      this.vpcId = pulumi.output(n.vpcId);
      this.privateSubnetIds = pulumi.output(n.privateSubnetIds);
      this.publicSubnetIds = pulumi.output(n.publicSubnetIds);
    } else {
      const plan = planSubnets(n.cidr, n.azCount, args.clusterName);
      const azs = aws.getAvailabilityZonesOutput({ state: "available" }, { parent: this });
      const vpc = new aws.ec2.Vpc(
        `${name}-vpc`,
        { cidrBlock: n.cidr, enableDnsHostnames: true, enableDnsSupport: true, tags: { Name: `${name}-vpc` } },
        { parent: this },
      );
      const igw = new aws.ec2.InternetGateway(
        `${name}-igw`,
        { vpcId: vpc.id, tags: { Name: `${name}-igw` } },
        { parent: this },
      );
      const publicRt = new aws.ec2.RouteTable(
        `${name}-public`,
        { vpcId: vpc.id, routes: [{ cidrBlock: "0.0.0.0/0", gatewayId: igw.id }] },
        { parent: this },
      );
      const subnet = (s: SubnetPlan) =>
        new aws.ec2.Subnet(
          `${name}-${s.kind}-${s.az}`,
          {
            vpcId: vpc.id,
            cidrBlock: s.cidr,
            availabilityZone: azs.names[s.az],
            mapPublicIpOnLaunch: s.kind === "public",
            tags: { ...s.tags, Name: `${name}-${s.kind}-${s.az}` },
          },
          { parent: this },
        );
      const publics = plan
        .filter((s) => s.kind === "public")
        .map((s) => {
          const sn = subnet(s);
          new aws.ec2.RouteTableAssociation(
            `${name}-public-${s.az}`,
            { subnetId: sn.id, routeTableId: publicRt.id },
            { parent: this },
          );
          return sn;
        });
      const natCount = n.natGateways === "perAz" ? n.azCount : 1;
      const nats = publics.slice(0, natCount).map((sn, i) => this.natGateway(name, i, sn, igw));
      const privates = plan
        .filter((s) => s.kind === "private")
        .map((s) => {
          const sn = subnet(s);
          const rt = new aws.ec2.RouteTable(
            `${name}-private-${s.az}`,
            { vpcId: vpc.id, routes: [{ cidrBlock: "0.0.0.0/0", natGatewayId: nats[s.az % natCount].id }] },
            { parent: this },
          );
          new aws.ec2.RouteTableAssociation(
            `${name}-private-${s.az}`,
            { subnetId: sn.id, routeTableId: rt.id },
            { parent: this },
          );
          return sn;
        });
      this.vpcId = vpc.id;
      this.privateSubnetIds = pulumi.all(privates.map((s) => s.id));
      this.publicSubnetIds = pulumi.all(publics.map((s) => s.id));
    }
    this.registerOutputs({
      vpcId: this.vpcId,
      privateSubnetIds: this.privateSubnetIds,
      publicSubnetIds: this.publicSubnetIds,
    });
  }

  private natGateway(
    name: string,
    i: number,
    subnet: aws.ec2.Subnet,
    igw: aws.ec2.InternetGateway,
  ): aws.ec2.NatGateway {
    const eip = new aws.ec2.Eip(`${name}-nat-${i}`, { domain: "vpc" }, { parent: this, dependsOn: [igw] });
    return new aws.ec2.NatGateway(
      `${name}-nat-${i}`,
      { allocationId: eip.id, subnetId: subnet.id, tags: { Name: `${name}-nat-${i}` } },
      { parent: this },
    );
  }
}
