// A pause/resume-capable runtime on the test cluster: the Kubernetes backend wrapped with
// snapshots into the suite's registry, optionally with a Manager on top. Used in-process by
// the tests and by crash-child.ts, which runs one operation in its own process and dies at a
// chosen step.
import type { Readable } from "node:stream";
import { buildManager } from "../../../runtime/backends.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { createLogger, silentLogger } from "../../../runtime/core/log.ts";
import type { SandboxManager } from "../../../runtime/core/manager.ts";
import type { ExecSession, SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { SnapshotterOptions } from "../../../runtime/snapshot/snapshotter.ts";
import { createPauseResume } from "../../../runtime/snapshot/wire.ts";
import { type PauseCaller, pauseCaller } from "../../support/pause.ts";
import { adminClients, testConfig, testPlatform, testSandboxSpec } from "../runtime/support.ts";

export interface PauseRuntimeArgs {
  kubeconfigPath: string;
  namespaces: { sandboxes: string; runtime: string };
  registry: string;
  /** replica name written into pause/resume records */
  identity: string;
  /** ready warm pods kept for base/nano */
  warm?: number;
  inFlightGraceMs?: number;
  onStep?: SnapshotterOptions["onStep"];
  /** run the Manager's maintenance tasks (automatic pause/wake, snapshot recovery) */
  maintenance?: boolean;
  /** snapshots.podRegistry: the pods move their own layers (the suite's registry is on their loopback) */
  podRegistry?: string;
}

export interface PauseRuntime {
  config: RuntimeConfig;
  platform: KubernetesPlatform;
  backend: KubernetesBackend;
  snap: PauseCaller;
  close(): Promise<void>;
}

export function pauseConfig(
  a: Pick<PauseRuntimeArgs, "namespaces" | "registry" | "warm" | "podRegistry">,
): RuntimeConfig {
  return testConfig(
    { ...a.namespaces, cleanup: async () => undefined },
    {
      snapshots: {
        registry: a.registry,
        repository: `snap-${a.namespaces.sandboxes}`,
        ...(a.podRegistry ? { podRegistry: a.podRegistry } : {}),
      },
      warmPool: a.warm ? [{ profile: "base", size: "nano", count: a.warm }] : [],
    },
  );
}

/** Backend + snapshots, started (informers synced); no Manager. */
export async function startPauseRuntime(a: PauseRuntimeArgs): Promise<PauseRuntime> {
  const config = pauseConfig(a);
  const platform = testPlatform(config, adminClients(a.kubeconfigPath), { identity: a.identity });
  const { backend } = platform;
  const pr = createPauseResume(platform, {
    config,
    clock: systemClock,
    logger: silentLogger(),
    onStep: a.onStep,
    inFlightGraceMs: a.inFlightGraceMs,
  });
  const snap = pauseCaller(backend, pr);
  await snap.start();
  return { config, platform, backend, snap, close: () => snap.close() };
}

/** The whole runtime as the service runs it: Manager (admission, audit) over the snapshotting backend. */
export async function startPauseManager(a: PauseRuntimeArgs): Promise<{
  config: RuntimeConfig;
  platform: KubernetesPlatform;
  backend: KubernetesBackend;
  manager: SandboxManager;
  close(): Promise<void>;
}> {
  const config = pauseConfig(a);
  const platform = testPlatform(config, adminClients(a.kubeconfigPath), { identity: a.identity });
  const logger = process.env.SBX_TEST_LOG ? createLogger({ level: process.env.SBX_TEST_LOG }) : silentLogger();
  const { manager } = await buildManager(config, { logger, clock: systemClock, platform, reaperIntervalMs: 3_600_000 });
  await manager.start({ reaper: false, maintenance: a.maintenance ?? false });
  return { config, platform, backend: platform.backend, manager, close: () => manager.close() };
}

export function sandboxSpec(config: RuntimeConfig, id: string, over: Partial<SandboxSpec> = {}): SandboxSpec {
  return testSandboxSpec(config, id, { env: { SANDBOX_GREETING: "kept across pause" }, ttlSeconds: 1800, ...over });
}

export async function output(session: ExecSession): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  const read = async (s: Readable) => {
    const chunks: Buffer[] = [];
    for await (const c of s) chunks.push(Buffer.from(c));
    return Buffer.concat(chunks).toString("utf8");
  };
  const [stdout, stderr, result] = await Promise.all([read(session.stdout), read(session.stderr), session.result]);
  return { stdout, stderr, exitCode: result.exitCode };
}

/**
 * Writes a varied tree into /workspace and /tmp: random data (one file of `bigMiB`), nested
 * directories, an empty file, a symlink, odd modes and names.
 */
export const FILL_SCRIPT = (bigMiB: number) =>
  [
    "set -e",
    "mkdir -p /workspace/src/deep/er /workspace/empty-dir /tmp/scratch",
    `head -c ${bigMiB * 1048576} /dev/urandom > /workspace/src/big.bin`,
    "head -c 4097 /dev/urandom > /workspace/src/deep/er/odd.bin",
    "printf 'print(42)\\n' > '/workspace/src/with space.py'",
    ": > /workspace/empty",
    "ln -s src/big.bin /workspace/link-to-big",
    "chmod 0751 /workspace/src/deep",
    "chmod 0640 /workspace/src/deep/er/odd.bin",
    "head -c 65536 /dev/urandom > /tmp/scratch/t.bin",
  ].join("\n");

/** One line naming every entry (type, mode, path, link target) and the SHA-256 of every file, hashed. */
export const TREE_DIGEST_SCRIPT = [
  "set -e",
  "for d in /workspace /tmp; do",
  "  cd $d",
  "  find . -mindepth 1 -printf '%y %m %p %l %s\\n' | LC_ALL=C sort",
  "  find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum",
  "done | sha256sum | cut -d' ' -f1",
].join("\n");
