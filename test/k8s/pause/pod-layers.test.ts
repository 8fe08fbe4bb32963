// Pods that move their own snapshot layers (snapshots.podRegistry, runtime/k8s/podLayers.ts), on
// the real control plane with the suite's registry on each sandbox pod's loopback (sbx-kubelet
// --sandbox-loopback-ports): a pause and a cold resume keep every byte of the tree while the
// replica's own archive path is never used; the snapshot restores through the replica's path
// too (the two make the same layers); a pod that cannot reach the registry falls back to
// the replica moving the layers, with the reason logged; and with snapshots.tokenAuth, against
// the suite's registry in `auth: token` mode, each pod moves its layers in its own repository
// with a token for it alone, which the replica mounts into the snapshot repository.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildManager } from "../../../runtime/backends.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { type Logger, silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import { createKubernetesPlatform, type KubernetesPlatform } from "../../../runtime/kubernetes.ts";
import { registryUrl, tokenRegistry, waitFor } from "../../support/cluster.ts";
import { captureLogger } from "../../support/logs.ts";
import { layerCounts } from "../../support/metrics.ts";
import { expectLayersInSandboxRepository } from "../../support/tokenRegistry.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "../runtime/support.ts";
import { FILL_SCRIPT, output, pauseConfig, TREE_DIGEST_SCRIPT } from "./runtime.ts";

let kubeconfigPath: string;
let ns: TestNamespaces;
const OWNER = "alice";
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  kubeconfigPath = await testKubeconfigPath();
  const clients = adminClients(kubeconfigPath);
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "pl");
}, 60_000);

afterAll(async () => {
  for (const c of closers.reverse()) await c();
  await ns?.cleanup();
});

/**
 * A Manager over its own backend replica; `podRegistry` unset: the replica moves the layers.
 * `tokens`: both the replica and the pods use the token registry, with snapshots.tokenAuth.
 */
async function runtime(
  identity: string,
  podRegistry: string | undefined,
  logger: Logger = silentLogger(),
  tokens = false,
): Promise<{ manager: SandboxManager; platform: KubernetesPlatform; moved: { out: number; in: number } }> {
  const tr = tokenRegistry();
  const registry = tokens ? tr.url : registryUrl();
  const config = pauseConfig({ namespaces: ns, registry, podRegistry });
  if (tokens)
    config.snapshots = {
      ...config.snapshots!,
      tokenAuth: {
        keyFile: tr.keyFile,
        certFile: tr.certFile,
        issuer: tr.issuer,
        service: tr.service,
        ttlSeconds: 900,
      },
    };
  const platform = createKubernetesPlatform(
    config,
    { logger, clock: systemClock },
    { clients: adminClients(kubeconfigPath), identity, retryPeriodMs: 500, leaseDurationMs: 4000 },
  );
  const { backend } = platform;
  // counts what the replica's own archive path carries (the fallback)
  const moved = { out: 0, in: 0 };
  const getArchive = backend.getArchive.bind(backend);
  const putArchive = backend.putArchive.bind(backend);
  backend.getArchive = async (id, path) => {
    moved.out++;
    return getArchive(id, path);
  };
  backend.putArchive = async (id, dir, tar) => {
    moved.in++;
    return putArchive(id, dir, tar);
  };
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform, reaperIntervalMs: 3_600_000 });
  await manager.start({ reaper: false, maintenance: false });
  closers.push(() => manager.close());
  return { manager, platform, moved };
}

async function run(m: SandboxManager, id: string, script: string): Promise<string> {
  const r = await output(await m.exec(OWNER, id, { command: ["sh", "-c", script], timeoutMs: 60_000 }));
  expect(r.stderr).toBe("");
  expect(r.exitCode).toBe(0);
  return r.stdout.trim();
}

describe("pods moving their own snapshot layers", () => {
  it("pause and a cold resume keep the tree byte for byte, and the replica's archive path carries nothing", async () => {
    const { manager, platform, moved } = await runtime("pod-layers", registryUrl());
    await waitFor("leadership", async () => platform.testing.controller.isLeader(), 20_000);
    const { id } = await manager.create({ owner: OWNER, profile: "base", size: "nano" });
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await run(manager, id, FILL_SCRIPT(8));
    const before = await run(manager, id, TREE_DIGEST_SCRIPT);

    await manager.pause!(OWNER, id);
    expect((await manager.get(OWNER, id)).phase).toBe("Paused");
    const layers = (await platform.pause.records.store.get(id))?.snapshot?.layers ?? [];
    await manager.resume!(OWNER, id);
    expect(await run(manager, id, TREE_DIGEST_SCRIPT)).toBe(before);
    expect(moved).toEqual({ out: 0, in: 0 });
    // /metrics says who moved them: every layer the pod, none the replica
    const counts = layerCounts(await manager.metrics.registry.metrics());
    expect(counts).toEqual({
      podPush: layers.length,
      replicaPush: 0,
      podRestore: layers.filter((l) => l.entries !== 0).length,
      replicaRestore: 0,
    });
    expect(counts.podRestore).toBeGreaterThan(0);

    // the same layers restore through the replica's path: a replica without podRegistry resumes it
    await manager.pause!(OWNER, id);
    const other = await runtime("replica-path", undefined);
    await other.manager.resume!(OWNER, id);
    expect(other.moved.in).toBeGreaterThan(0);
    expect(await run(other.manager, id, TREE_DIGEST_SCRIPT)).toBe(before);
    await other.manager.kill(OWNER, id);
  }, 240_000);

  it("a pod that cannot reach the registry falls back to the replica moving the layers", async () => {
    const { logger, lines } = captureLogger();
    // nothing listens on port 1 in the pod: its helper's connect is refused
    const { manager, moved } = await runtime("unreachable", "http://127.0.0.1:1", logger);
    const { id } = await manager.create({ owner: OWNER, profile: "base", size: "nano" });
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await run(manager, id, "head -c 1048576 /dev/urandom > /workspace/f && sha256sum /workspace/f");
    const sum = await run(manager, id, "sha256sum /workspace/f");
    await manager.pause!(OWNER, id);
    await manager.resume!(OWNER, id);
    expect(await run(manager, id, "sha256sum /workspace/f")).toBe(sum);
    expect(moved.out).toBeGreaterThan(0);
    expect(moved.in).toBeGreaterThan(0);
    const counts = layerCounts(await manager.metrics.registry.metrics());
    expect(counts).toMatchObject({ podPush: 0, podRestore: 0 });
    expect(counts.replicaPush).toBeGreaterThan(0);
    expect(counts.replicaRestore).toBeGreaterThan(0);
    expect(lines).toContainEqual(
      expect.objectContaining({ sandbox: id, op: "push", msg: expect.stringContaining("the replica moves it") }),
    );
    await manager.kill(OWNER, id);
  }, 240_000);

  it("with tokenAuth each pod moves its layers in its own repository, with a token for it alone", async () => {
    const { logger, lines } = captureLogger();
    const { manager, platform, moved } = await runtime("token-layers", tokenRegistry().url, logger, true);
    const { id } = await manager.create({ owner: OWNER, profile: "base", size: "nano" });
    await manager.wait(OWNER, id, { timeoutMs: 60_000 });
    await run(manager, id, FILL_SCRIPT(4));
    const before = await run(manager, id, TREE_DIGEST_SCRIPT);

    await manager.pause!(OWNER, id);
    const snapshot = (await platform.pause.records.store.get(id))?.snapshot;
    expect(moved).toEqual({ out: 0, in: 0 });
    // each layer is in the sandbox's own repository and mounted into the snapshot repository;
    // without a token the registry answers nothing
    await expectLayersInSandboxRepository(snapshot, id);

    await manager.resume!(OWNER, id);
    expect(await run(manager, id, TREE_DIGEST_SCRIPT)).toBe(before);
    expect(moved).toEqual({ out: 0, in: 0 });
    expect(lines.filter((l) => String(l.msg).includes("no registry credential of their own"))).toEqual([]);
    await manager.kill(OWNER, id);
  }, 240_000);
});
