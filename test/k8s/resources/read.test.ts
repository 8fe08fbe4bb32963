// Backend.readResources on the real test control plane: a sandbox whose command channel is open
// is read inside its pod over that channel (no API request), with memory, pids and /workspace
// figures and its size class's limits; a command holding 64 MiB shows in the memory read; a
// sandbox with no open channel is not read (opening one to sample it would cost an API request).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { startTestBackend, type TestBackend, testSandboxSpec } from "../runtime/support.ts";

const MiB = 1024 * 1024;
let t: TestBackend;
let config: RuntimeConfig;
let backend: KubernetesBackend;

beforeAll(async () => {
  t = await startTestBackend("rt-res");
  ({ config, backend } = t);
});

afterAll(async () => {
  await t?.close();
});

async function ready(id: string): Promise<void> {
  await backend.provision(testSandboxSpec(config, id));
  await backend.awaitReady(id, { timeoutMs: 60_000 });
}

const readOf = async (id: string) => (await backend.readResources()).find((r) => r.id === id);

describe("readResources on Kubernetes", () => {
  it("reads a sandbox with an open channel in its pod, and leaves one without a channel out", async () => {
    await ready("res-1");
    await ready("res-2");
    expect(await readOf("res-1")).toBeUndefined(); // no command yet: no channel
    const first = await backend.exec("res-1", { command: ["true"] });
    await first.result;
    expect(t.platform.testing.channels.pool.current("res-1")).toBeDefined();

    const r = (await readOf("res-1"))!;
    expect(r).toBeDefined();
    const size = testSandboxSpec(config, "x").size;
    expect(r).toMatchObject({
      owner: testSandboxSpec(config, "res-1").owner,
      memoryLimitBytes: size.memoryLimitBytes,
      pidsLimit: size.pids,
      workspaceBytes: size.workspaceBytes,
    });
    expect(r.memoryWorkingSetBytes).toBeGreaterThan(0);
    expect(r.pids).toBeGreaterThan(0);
    expect(r.cpuUsageUsec).toBeGreaterThanOrEqual(0);
    expect(r.workspaceUsedBytes).toBeGreaterThanOrEqual(0);
    expect(await readOf("res-2")).toBeUndefined();

    const holder = await backend.exec("res-1", {
      command: ["python3", "-c", "import time; b=b'x'*(64<<20); print('held', flush=True); time.sleep(120)"],
    });
    await new Promise<void>((resolve) => holder.stdout.once("data", () => resolve()));
    const held = (await readOf("res-1"))!;
    expect(held.memoryWorkingSetBytes! - r.memoryWorkingSetBytes!).toBeGreaterThan(60 * MiB);
    holder.kill();
    await holder.result;
  }, 180_000);
});
