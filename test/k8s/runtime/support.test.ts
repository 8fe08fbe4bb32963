// startTestBackend, the beforeAll of the backend-level k8s tests, keeps its promises: the
// backend it hands over leads, and nothing of it outlives close(), nor a start that failed
// (the caller's afterAll has no handle then, so the helper must clean up itself).
import { expect, it } from "vitest";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { adminClients, startTestBackend, testKubeconfigPath } from "./support.ts";

/** the test namespaces not being deleted, by name */
async function liveTestNamespaces(): Promise<Set<string>> {
  const { core } = adminClients(await testKubeconfigPath());
  const list = await core.listNamespace({ labelSelector: "sbx.dev/test=true" });
  return new Set(list.items.filter((n) => !n.metadata?.deletionTimestamp).map((n) => n.metadata!.name!));
}

async function newSince(before: Set<string>): Promise<string[]> {
  return [...(await liveTestNamespaces())].filter((n) => !before.has(n));
}

it("hands over a started, leading backend that beforeStart saw first; close() deletes both namespaces", async () => {
  const before = await liveTestNamespaces();
  let seen: KubernetesBackend | undefined;
  const t = await startTestBackend(
    "rt-tb",
    {},
    {},
    {
      beforeStart: (backend) => {
        seen = backend;
      },
    },
  );
  try {
    expect(seen).toBe(t.backend);
    expect(t.platform.testing.controller.isLeader()).toBe(true);
    expect(t.config.kubernetes.namespace).toBe(t.ns.sandboxes);
    expect((await newSince(before)).sort()).toEqual([t.ns.sandboxes, t.ns.runtime].sort());
  } finally {
    await t.close();
  }
  expect(await newSince(before)).toEqual([]);
});

it("a backend that fails to start is closed and its namespaces deleted; the caller gets the start's error", async () => {
  const before = await liveTestNamespaces();
  const failed = await startTestBackend(
    "rt-tb-fail",
    {},
    {},
    {
      beforeStart: () => {
        throw new Error("refused by the test");
      },
    },
  ).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(failed).toMatchObject({ message: "refused by the test" });
  expect(await newSince(before)).toEqual([]);
});
