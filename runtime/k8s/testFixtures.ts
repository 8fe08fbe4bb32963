// Pod and record fixtures for the pure status/plan tests.
import type { V1Pod } from "@kubernetes/client-node";
import { validateRuntimeConfig } from "../config/schema.ts";
import { SANDBOX_CONTAINER } from "./contract.ts";
import { buildSandboxResource, type SandboxResource } from "./resource.ts";

const config = validateRuntimeConfig({});

export function podWith(status: V1Pod["status"], meta: Partial<NonNullable<V1Pod["metadata"]>> = {}): V1Pod {
  return {
    metadata: { name: "sb-1", labels: { "sbx.dev/sandbox": "sb-1" }, ...meta },
    spec: { nodeName: "kwok-1", containers: [{ name: SANDBOX_CONTAINER, image: "img" }] },
    status,
  };
}
export const running = (ready: boolean) =>
  podWith({
    phase: "Running",
    conditions: [
      { type: "Ready", status: ready ? "True" : "False", lastTransitionTime: new Date("2026-01-01T00:00:05Z") },
    ],
    containerStatuses: [
      {
        name: SANDBOX_CONTAINER,
        ready,
        restartCount: 0,
        image: "img",
        imageID: "",
        state: { running: { startedAt: new Date("2026-01-01T00:00:04Z") } },
      },
    ],
  });
export const terminated = (exitCode: number, reason?: string, phase = "Running") =>
  podWith({
    phase,
    containerStatuses: [
      {
        name: SANDBOX_CONTAINER,
        ready: false,
        restartCount: 0,
        image: "img",
        imageID: "",
        state: { terminated: { exitCode, reason, finishedAt: new Date("2026-01-01T00:01:00Z") } },
      },
    ],
  });
export const waiting = (reason: string) =>
  podWith({
    phase: "Pending",
    containerStatuses: [
      {
        name: SANDBOX_CONTAINER,
        ready: false,
        restartCount: 0,
        image: "img",
        imageID: "",
        state: { waiting: { reason, message: `${reason}!` } },
      },
    ],
  });

export function record(over: Partial<SandboxResource> = {}): SandboxResource {
  const cr = buildSandboxResource(
    {
      id: "sb-1",
      owner: "alice",
      image: { profile: "base", image: "img" },
      size: config.sizeClasses.nano,
      env: {},
      ttlSeconds: 60,
      idleTimeoutSeconds: 0,
      metadata: {},
      createdAt: new Date("2026-01-01T00:00:00Z"),
    },
    "ns",
  );
  return { ...cr, metadata: { ...cr.metadata, uid: "uid-1", resourceVersion: "1" }, ...over };
}
