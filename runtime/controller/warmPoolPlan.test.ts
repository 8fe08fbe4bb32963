import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { LABELS, POOL, SANDBOX_CONTAINER } from "../k8s/contract.ts";
import { type PoolTarget, planWarmPool } from "./warmPoolPlan.ts";

const now = new Date("2026-01-01T01:00:00Z");
let n = 0;
function pool(
  profile: string,
  size: string,
  o: { ready?: boolean; image?: string; ageMs?: number; failed?: boolean } = {},
): V1Pod {
  return {
    metadata: {
      name: `warm-${profile}-${size}-${n++}`,
      labels: { [LABELS.pool]: POOL.warm, [LABELS.profile]: profile, [LABELS.size]: size },
      creationTimestamp: new Date(now.getTime() - (o.ageMs ?? 1000)),
    },
    spec: { containers: [{ name: SANDBOX_CONTAINER, image: o.image ?? "img:1" }] },
    status: o.failed
      ? { phase: "Failed", reason: "DeadlineExceeded" }
      : {
          phase: o.ready === false ? "Pending" : "Running",
          conditions: [{ type: "Ready", status: o.ready === false ? "False" : "True" }],
          containerStatuses:
            o.ready === false
              ? []
              : [
                  {
                    name: SANDBOX_CONTAINER,
                    ready: true,
                    restartCount: 0,
                    image: "img:1",
                    imageID: "",
                    state: { running: {} },
                  },
                ],
        },
  };
}
const target = (count: number, over: Partial<PoolTarget> = {}): PoolTarget => ({
  profile: "base",
  size: "nano",
  count,
  image: "img:1",
  ...over,
});
const run = (targets: PoolTarget[], pods: V1Pod[], maxCreatesPerRound = 100) =>
  planWarmPool({ targets, pods, now, maxAgeMs: 3600_000, maxCreatesPerRound });

describe("planWarmPool", () => {
  it("fills an empty pool to its target", () => {
    expect(run([target(5)], []).create).toEqual([{ target: target(5), count: 5 }]);
  });
  it("counts starting pods so it does not overshoot", () => {
    expect(run([target(3)], [pool("base", "nano", { ready: false }), pool("base", "nano")]).create).toEqual([
      { target: target(3), count: 1 },
    ]);
  });
  it("caps creates per round", () => {
    expect(run([target(10), target(10, { size: "small" })], [], 12).create.map((c) => c.count)).toEqual([10, 2]);
  });
  it.each([
    ["failed pool pods", [pool("base", "nano", { failed: true })], "pool pod ended: DeadlineExceeded"],
    ["pods of a pool that is no longer configured", [pool("data", "nano")], "no warm pool is configured for data/nano"],
    ["pods with an outdated image", [pool("base", "nano", { image: "img:0" })], "profile base now uses image img:1"],
    ["pods past the maximum age", [pool("base", "nano", { ageMs: 3600_000 })], "pool pod reached its maximum age"],
  ])("replaces %s", (_n, pods, why) => {
    const p = run([target(1)], pods);
    expect(p.delete).toEqual([{ name: pods[0].metadata!.name, why }]);
    expect(p.create).toEqual([{ target: target(1), count: 1 }]);
  });
  it("sheds excess pods starting ones first", () => {
    const starting = pool("base", "nano", { ready: false });
    const p = run([target(1)], [pool("base", "nano"), starting, pool("base", "nano")]);
    expect(p.delete.map((d) => d.name)[0]).toBe(starting.metadata!.name);
    expect(p.delete).toHaveLength(2);
  });
});
