// One catalog reader on Kubernetes: the backend's warm pool resolves images through the
// catalog it is handed (the Manager's, built by the composition root), which merges
// config.catalog with the catalogPath file, against the real API server.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ImageCatalog } from "../../../runtime/core/catalog.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { LABELS, POOL } from "../../../runtime/k8s/contract.ts";
import { createKubernetesPlatform, type KubernetesPlatform } from "../../../runtime/kubernetes.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
} from "./support.ts";

const INLINE_IMAGE = "registry.local/sbx/base:1";
const FILE_IMAGE = "registry.local/sbx/extra:1";

let clients: KubeClients;
let ns: TestNamespaces;
let dir: string;
let platform: KubernetesPlatform;

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "rt-cat");
  dir = mkdtempSync(join(tmpdir(), "sbx-catalog-"));
  const catalogPath = join(dir, "catalog.json");
  writeFileSync(catalogPath, JSON.stringify({ extra: FILE_IMAGE }));
  const config = testConfig(ns, {
    catalog: { base: INLINE_IMAGE },
    catalogPath,
    warmPool: [
      { profile: "base", size: "nano", count: 1 },
      { profile: "extra", size: "nano", count: 1 },
    ],
  });
  const logger = silentLogger();
  const catalog = new ImageCatalog({ inline: config.catalog, path: config.catalogPath, logger });
  platform = createKubernetesPlatform(
    config,
    { logger, clock: systemClock, catalog },
    { clients, retryPeriodMs: 500, leaseDurationMs: 4000, activityFlushMs: 500 },
  );
  await platform.backend.start();
  await waitFor("leadership", async () => platform.testing.controller.isLeader(), 15_000);
});

afterAll(async () => {
  await platform?.close();
  await ns?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the Kubernetes backend reads the one catalog", () => {
  it("warm pools fill for an inline profile and for a catalogPath profile, with their images", async () => {
    const ready = async () =>
      Object.fromEntries((await platform.backend.poolStatus()).map((p) => [p.profile, p.ready]));
    // generous: pod start on a busy 2-core machine
    await waitFor(
      "one ready warm pod per pool",
      async () => {
        const r = await ready();
        return r.base === 1 && r.extra === 1;
      },
      90_000,
    );
    const pods = (
      await clients.core.listNamespacedPod({ namespace: ns.sandboxes, labelSelector: `${LABELS.pool}=${POOL.warm}` })
    ).items;
    const imageOf = (profile: string) =>
      pods.find((p) => p.metadata?.labels?.[LABELS.profile] === profile)?.spec?.containers[0].image;
    expect(imageOf("base")).toBe(INLINE_IMAGE);
    expect(imageOf("extra")).toBe(FILE_IMAGE);
  });
});
