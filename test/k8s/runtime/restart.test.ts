// The manager is killed in the middle of a create burst and a new one starts: its admission
// budget, rebuilt from the cluster, equals what the live sandboxes use (accepts the dead
// process had not written are gone for good, and not counted), and stays that way as the
// burst continues against the new manager.
// What a crash cannot avoid, with any create design: writes the dead process had already
// sent land after the new process listed the cluster. Those few (at most the write pool's
// concurrency) are adopted late, may push the records past the budget, and the namespace
// ResourceQuota, the hard ceiling, refuses their pods: they fail with QuotaExceeded and
// release their share, so running pods never exceed capacity.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildManager } from "../../../runtime/backends.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  addSandboxNodes,
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testPlatform,
} from "./support.ts";

const CAPACITY = 300; // nano sandboxes the budget holds
let clients: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let removeNodes: () => Promise<void>;
const managers: { manager: SandboxManager; platform: KubernetesPlatform; backend: KubernetesBackend }[] = [];

async function startManager(identity: string) {
  const platform = testPlatform(config, adminClients(await testKubeconfigPath()), { identity });
  const { backend } = platform;
  const { manager } = await buildManager(config, {
    logger: silentLogger(),
    clock: systemClock,
    platform,
    reaperIntervalMs: 60_000,
  });
  await manager.start({ reaper: false });
  managers.push({ manager, platform, backend });
  return { manager, platform, backend };
}

beforeAll(async () => {
  clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  removeNodes = await addSandboxNodes(clients.core, "restart", 8);
  ns = await freshNamespaces(clients.core, "rt-restart");
  await clients.core.createNamespacedResourceQuota({
    namespace: ns.sandboxes,
    body: { metadata: { name: "sandboxes" }, spec: { hard: { pods: String(CAPACITY), "requests.cpu": "30" } } },
  });
  config = testConfig(ns, { budget: { cpu: "30", memory: "64Gi" }, defaults: { size: "nano", idleTimeoutSeconds: 0 } });
}, 300_000);

afterAll(async () => {
  for (const m of managers) await m.manager.close().catch(() => undefined);
  await ns?.cleanup();
  await removeNodes?.();
}, 300_000);

async function recordsInCluster(): Promise<string[]> {
  const list = await clients.custom.listNamespacedCustomObject({
    group: "sbx.dev",
    version: "v1alpha1",
    namespace: ns.sandboxes,
    plural: "sandboxes",
  });
  return (list.items as { metadata: { name: string } }[]).map((i) => i.metadata.name);
}

describe("manager restarted in the middle of a burst", () => {
  it("rebuilds the budget to exactly what live sandboxes use", async () => {
    let current = await startManager("first");
    let stop = false;
    let accepted = 0;
    let rejected = 0;
    const clientsLoop = Array.from({ length: 30 }, async (_, c) => {
      while (!stop) {
        try {
          await current.manager.create({ owner: `client-${c}`, profile: "base", size: "nano" });
          accepted++;
        } catch (err) {
          rejected++;
          const code = (err as { code?: string }).code;
          if (code !== "capacity" && code !== "upstream") throw err;
        }
        await new Promise((r) => setTimeout(r, 15));
      }
    });

    await waitFor("mid-burst", async () => accepted >= CAPACITY / 2, 60_000);
    await current.platform.testing.crash(); // killed: no drain, no goodbye
    const lostWindow = current.platform.testing.records.size;
    current = await startManager("second");
    const rebuilt = current.manager.admission.usage();
    const listed = await current.backend.list();
    expect(rebuilt.used.cpuMillis).toBe(
      listed.filter((s) => s.phase !== "Failed" && s.phase !== "Succeeded").reduce((a, s) => a + s.cpuRequestMillis, 0),
    );

    await new Promise((r) => setTimeout(r, 3000)); // the burst goes on against the new manager
    stop = true;
    await Promise.all(clientsLoop);
    await current.platform.testing.records.drain();
    await waitFor(
      "informer caught up",
      async () => (await recordsInCluster()).length === (await current.backend.list()).length,
      30_000,
    );

    // Settle: every record either runs or was refused by the quota; none stays Pending.
    await waitFor(
      "settled",
      async () => (await current.backend.list()).every((s) => s.ready || s.phase === "Failed"),
      240_000,
    );
    const live = await current.backend.list();
    const names = await recordsInCluster();
    const holding = live.filter((s) => s.phase !== "Failed" && s.phase !== "Succeeded");
    const refused = live.filter((s) => s.phase === "Failed");
    const used = current.manager.admission.usage();
    const allPods = (await clients.core.listNamespacedPod({ namespace: ns.sandboxes })).items;
    const quota = await clients.core.readNamespacedResourceQuota({ name: "sandboxes", namespace: ns.sandboxes });
    console.log(
      JSON.stringify({
        pods: allPods.length,
        quota: quota.status,
        holding: holding.length,
        refused: refused.length,
        names: names.length,
        phases: [...new Set(holding.map((s) => `${s.phase}/${s.ready}`))],
      }),
    );
    expect(used.used.cpuMillis).toBe(holding.reduce((a, s) => a + s.cpuRequestMillis, 0));
    expect(used.reservations).toBe(holding.length);
    expect(holding.length).toBeLessThanOrEqual(CAPACITY);
    expect(names.length).toBeLessThanOrEqual(CAPACITY + 32); // the write pool's concurrency bounds the crash window
    for (const s of refused) expect(s.reason).toBe("QuotaExceeded");
    const running = (await clients.core.listNamespacedPod({ namespace: ns.sandboxes })).items.filter(
      (p) => p.status?.phase === "Running",
    );
    expect(running.length).toBe(holding.length);
    console.log(
      JSON.stringify({
        accepted,
        rejected,
        records: names.length,
        running: running.length,
        refusedByQuota: refused.length,
        unwrittenAtCrash: lostWindow,
        usedCpuMillis: used.used.cpuMillis,
      }),
    );
  }, 600_000);
});
