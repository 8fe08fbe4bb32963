// Downloads that fail say so on the Kubernetes backend (issue 10 item 7), against the real
// control plane (exec through the API server into the pod's sandbox): a missing or unreadable
// path is refused before any byte, naming it; a tar killed mid-stream errors the archive
// stream (the service turns that into a cut response, test/server/downloads.test.ts).
import type { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import { startTestBackend, type TestBackend, testSandboxSpec } from "./support.ts";

let t: TestBackend;
let config: RuntimeConfig;
let backend: KubernetesBackend;
const ID = "dl-1";

async function collect(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks).toString("utf8");
}

async function sh(script: string) {
  const s = await backend.exec(ID, { command: ["sh", "-c", script] });
  const [stdout, stderr, result] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
  return { stdout, stderr, ...result };
}

beforeAll(async () => {
  t = await startTestBackend("rt-dl");
  ({ config, backend } = t);
  await backend.provision(testSandboxSpec(config, ID));
  await backend.awaitReady(ID, { timeoutMs: 60_000 });
  const setup = await sh(
    "mkdir -p /workspace/d /workspace/closed && echo ok > /workspace/d/a && echo s > /workspace/d/b && chmod 000 /workspace/d/b /workspace/closed && truncate -s 2G /workspace/huge",
  );
  expect(setup.exitCode, setup.stderr).toBe(0);
  // the premise: the sandbox's user (uid 0 without capabilities here) is bound by file modes
  expect((await sh("cat /workspace/d/b")).exitCode).not.toBe(0);
}, 120_000);

afterAll(async () => {
  await backend?.delete(ID).catch(() => undefined);
  await t?.close();
});

describe("Kubernetes downloads that fail say so", () => {
  it.each([
    {
      path: "/workspace/d",
      code: "validation",
      says: ['path: invalid value "/workspace/d"', '"/workspace/d/b" under it is not readable'],
    },
    {
      path: "/workspace/d/b",
      code: "validation",
      says: ["it is not readable by the sandbox's user (permission denied)"],
    },
    { path: "/workspace/closed", code: "validation", says: ["it is not readable"] },
    { path: "/workspace/missing", code: "not_found", says: [`path "${ID}:/workspace/missing" not found`] },
  ])("$path is refused before any byte ($code)", async ({ path, code, says }) => {
    const err = await backend.getArchive(ID, path).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err).toMatchObject({ code });
    for (const s of says) expect(err!.message).toContain(s);
  });

  it("a readable file still downloads", async () => {
    expect(await collect(await backend.getArchive(ID, "/workspace/d/a"))).toContain("ok\n");
  });

  it("a tar killed mid-stream errors the archive stream, naming the exit", async () => {
    const stream = await backend.getArchive(ID, "/workspace/huge");
    const failed = new Promise<Error>((resolve) => stream.on("error", resolve));
    await new Promise<void>((resolve) =>
      stream.once("data", () => {
        stream.pause();
        resolve();
      }),
    );
    const killed = await sh("pkill -KILL -x tar; echo $?");
    expect(killed.stdout.trim(), killed.stderr).toBe("0");
    stream.resume();
    const err = await failed;
    expect(err).toMatchObject({ code: "upstream" });
    expect(err.message).toMatch(
      new RegExp(`^get files from sandbox ${ID} at /workspace/huge: tar exited (137|-1|\\d+)`),
    );
  }, 60_000);
});
