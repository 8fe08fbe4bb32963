import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "../../runtime/k8s/contract.ts";
import { kwokConfig, nodeManifest, type Ports, planNodes, REAL_NODES } from "./plan.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-plan-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const ports = { kubelet: 41234 } as Ports;

describe("kwokConfig", () => {
  it("points every node's kubelet port at sbx-kubelet", () => {
    const stages = join(dir, "stages.yaml");
    writeFileSync(stages, "kind: Stage\nPort: SBX_KUBELET_PORT\n---\nkind: Stage\nPort: SBX_KUBELET_PORT\n");
    const config = kwokConfig(stages, ports);
    expect(config.match(/Port: 41234/g)).toHaveLength(2);
    expect(config).not.toContain("SBX_KUBELET_PORT");
    expect(config.startsWith("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration")).toBe(true);
  });

  it("refuses stages that do not route exec to sbx-kubelet", () => {
    const stages = join(dir, "no-port.yaml");
    writeFileSync(stages, "kind: Stage\n");
    expect(() => kwokConfig(stages, ports)).toThrow("must set the node kubelet port to SBX_KUBELET_PORT");
  });

  it("accepts the suite's own stages", () => {
    expect(kwokConfig(new URL("./kwok-stages.yaml", import.meta.url).pathname, ports)).toContain("Port: 41234");
  });

  it("keeps every pod Stage off the real nodes, whose pods sbx-kubelet runs and reports", () => {
    const config = kwokConfig(new URL("./kwok-stages.yaml", import.meta.url).pathname, ports);
    const podStages = config.split("\n---\n").filter((d) => d.includes("resourceRef: {apiGroup: v1, kind: Pod}"));
    expect(podStages.length).toBeGreaterThanOrEqual(5);
    const exclusion = `- key: '.spec.nodeName'\n      operator: NotIn\n      values: [${REAL_NODES.map((n) => `"${n}"`).join(", ")}]`;
    for (const stage of podStages) expect(stage).toContain(exclusion);
    expect(config).not.toContain("SBX_REAL_NODES");
    expect(planNodes().map((n) => n.name)).toEqual(expect.arrayContaining([...REAL_NODES]));
  });
});

describe("planNodes", () => {
  it("labels and taints sandbox nodes like the sandbox node group and leaves one system node untainted", () => {
    const nodes = planNodes(3);
    const sandbox = nodes.filter((n) => n.labels[SANDBOX_NODE_LABEL.key] === SANDBOX_NODE_LABEL.value);
    expect(sandbox.map((n) => n.name)).toEqual(["sbx-sandbox-0", "sbx-sandbox-1", "sbx-sandbox-2"]);
    for (const n of sandbox) expect(n.taints).toEqual([SANDBOX_NODE_TAINT]);
    const system = nodes.filter((n) => n.taints.length === 0);
    expect(system.map((n) => n.name)).toEqual(["sbx-system-0"]);
  });

  it("gives every node realistic capacity", () => {
    const m = nodeManifest(planNodes(1)[0]) as {
      status: { capacity: Record<string, string>; allocatable: Record<string, string> };
    };
    expect(m.status.capacity).toMatchObject({ cpu: "4", memory: "16Gi", pods: "110" });
    expect(m.status.allocatable).toEqual(m.status.capacity);
  });
});
