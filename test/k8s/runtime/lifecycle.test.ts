// The whole sandbox lifecycle through the Kubernetes backend against the real control plane:
// create -> ready (watch-based) -> exec (streams, exit codes, stdin, env, cwd, timeout) ->
// files in and out (tar over exec) -> logs -> kill; plus status truth (OOM while Running)
// and an externally deleted pod making the sandbox gone.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { SandboxEvent, SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { LABELS, SANDBOX_CONTAINER } from "../../../runtime/k8s/contract.ts";
import { describeLeftovers, processesUnder } from "../../../tools/control-plane/leftovers.ts";
import { terminateContainer, waitFor } from "../../support/cluster.ts";
import { startTestBackend, type TestBackend, type TestNamespaces, testSandboxSpec } from "./support.ts";

let t: TestBackend;
let clients: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;
const events: SandboxEvent[] = [];

const spec = (id: string, over: Partial<SandboxSpec> = {}): SandboxSpec =>
  testSandboxSpec(config, id, {
    env: { SANDBOX_GREETING: "hello from the record" },
    metadata: { purpose: "lifecycle" },
    ...over,
  });

async function collect(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks).toString("utf8");
}

/** every process of the sandbox, one command line per line (POSIX sh, as on any image) */
const PROCESS_LIST = `for d in /proc/[0-9]*; do { tr '\\0' ' ' < "$d/cmdline"; } 2>/dev/null | sed 's/ $//'; echo; done`;

async function run(id: string, command: string[], extra: Partial<Parameters<KubernetesBackend["exec"]>[1]> = {}) {
  const s = await backend.exec(id, { command, ...extra });
  const [stdout, stderr, result] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
  return { stdout, stderr, ...result };
}

beforeAll(async () => {
  // subscribed before the backend starts, so that no event is missed
  t = await startTestBackend("rt-life", {}, {}, { beforeStart: (b) => b.subscribe((e) => events.push(e)) });
  ({ clients, ns, config, backend } = t);
});

afterAll(async () => {
  await t?.close();
});

describe("Kubernetes backend lifecycle", () => {
  it("creates, becomes ready by watch, runs commands, moves files, shows logs and kills", async () => {
    const accepted = await backend.provision(spec("life-1"));
    expect(accepted).toMatchObject({
      id: "life-1",
      owner: "alice",
      phase: "Pending",
      ready: false,
      warm: false,
      cpuRequestMillis: 100,
    });

    const ready = await backend.awaitReady("life-1", { timeoutMs: 60_000 });
    expect(ready).toMatchObject({ id: "life-1", phase: "Running", ready: true });
    expect(ready.node).toMatch(/^sbx-sandbox-/);

    // The record is durable and the pod is the hardened one, owned by the record.
    const cr = await clients.custom.getNamespacedCustomObject({
      group: "sbx.dev",
      version: "v1alpha1",
      namespace: ns.sandboxes,
      plural: "sandboxes",
      name: "life-1",
    });
    expect(cr.spec).toMatchObject({ owner: "alice", profile: "base", size: "nano", desiredState: "Running" });
    await waitFor("status Running recorded", async () => {
      const c = await clients.custom.getNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        name: "life-1",
      });
      return c.status?.phase === "Running" && c.status?.podName === "life-1";
    });
    const pod = await clients.core.readNamespacedPod({ name: "life-1", namespace: ns.sandboxes });
    expect(pod.metadata!.ownerReferences![0]).toMatchObject({ kind: "Sandbox", name: "life-1", uid: cr.metadata.uid });
    expect(pod.spec!.automountServiceAccountToken).toBe(false);
    expect(pod.spec!.containers[0].securityContext!.readOnlyRootFilesystem).toBe(true);
    expect(JSON.stringify(pod.spec)).not.toContain("hello from the record"); // env arrives per exec, not in the spec

    // exec: stdout, stderr, exit code, the record's env, per-call env and cwd
    const r1 = await run("life-1", ["sh", "-c", 'echo "out $SANDBOX_GREETING $EXTRA $PWD"; echo err >&2; exit 3'], {
      env: { EXTRA: "x1" },
      cwd: "/tmp",
    });
    expect(r1).toMatchObject({
      stdout: "out hello from the record x1 /tmp\n",
      stderr: "err\n",
      exitCode: 3,
      timedOut: false,
    });

    // streaming: the first line arrives before the command ends. The command waits for a file
    // the test creates only after that line arrived, so it cannot end otherwise (no clock).
    const s = await backend.exec("life-1", {
      command: ["sh", "-c", "echo first; until [ -e /tmp/gate ]; do sleep 0.05; done; echo second"],
      timeoutMs: 60_000,
    });
    const out = collect(s.stdout);
    void collect(s.stderr);
    await new Promise<void>((resolve) => s.stdout.once("data", () => resolve()));
    expect((await run("life-1", ["touch", "/tmp/gate"])).exitCode).toBe(0);
    expect(await s.result).toMatchObject({ exitCode: 0, timedOut: false });
    expect(await out).toBe("first\nsecond\n");

    // stdin, closed after the bytes
    expect((await run("life-1", ["sh", "-c", "wc -c"], { stdin: Buffer.from("12345") })).stdout.trim()).toBe("5");

    // timeout kills the command and reports 124
    const t0 = Date.now();
    const timed = await run("life-1", ["sh", "-c", "sleep 30 & sleep 30"], { timeoutMs: 1000 });
    expect(timed).toMatchObject({ exitCode: 124, timedOut: true });
    expect(Date.now() - t0).toBeLessThan(25_000); // ended by the timeout, not by `sleep 30`; generous for a busy machine

    // files: put a tar into /workspace, read it back from inside, get it out as a tar
    const local = mkdtempSync(join(tmpdir(), "sbx-life-"));
    mkdirSync(join(local, "src", "pkg"), { recursive: true });
    writeFileSync(join(local, "src", "pkg", "data.txt"), "payload-123\n");
    const tarIn = spawnSync("tar", ["-c", "-f", "-", "-C", join(local, "src"), "pkg"]).stdout;
    await backend.putArchive("life-1", "/workspace/in", Readable.from([tarIn]));
    expect((await run("life-1", ["cat", "/workspace/in/pkg/data.txt"])).stdout).toBe("payload-123\n");
    const outStream = await backend.getArchive("life-1", "/workspace/in/pkg");
    const chunks: Buffer[] = [];
    for await (const c of outStream) chunks.push(Buffer.from(c));
    const outDir = join(local, "out");
    mkdirSync(outDir);
    const x = spawnSync("tar", ["-x", "-f", "-", "-C", outDir], { input: Buffer.concat(chunks) });
    expect(x.status).toBe(0);
    expect(readFileSync(join(outDir, "pkg", "data.txt"), "utf8")).toBe("payload-123\n");
    await expect(backend.getArchive("life-1", "/workspace/missing")).rejects.toMatchObject({ code: "not_found" });

    // logs: the idle process's start line
    expect(await collect(await backend.logs("life-1", {}))).toContain("sbx: sandbox started");

    // touch: visible at once locally, persisted on the record after a flush
    const at = new Date();
    await backend.touch("life-1", at);
    expect((await backend.describe("life-1"))!.lastActivityAt).toBe(at.toISOString());
    await waitFor("activity annotation", async () => {
      const c = await clients.custom.getNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        name: "life-1",
      });
      return c.metadata.annotations?.["sbx.dev/last-activity"] === at.toISOString();
    });

    // list and kill
    expect((await backend.list()).map((x) => x.id)).toContain("life-1");
    await backend.delete("life-1");
    await backend.delete("life-1"); // idempotent
    await waitFor("delete event", async () => events.some((e) => e.type === "delete" && e.id === "life-1"));
    expect(await backend.describe("life-1")).toBeUndefined();
    await waitFor("pod gone", async () => {
      try {
        await clients.core.readNamespacedPod({ name: "life-1", namespace: ns.sandboxes });
        return false;
      } catch {
        return true;
      }
    });
    await expect(backend.exec("life-1", { command: ["true"] })).rejects.toMatchObject({ code: "not_found" });
  });

  // A real kubelet leaves an exec's command running when its stream closes, and so does the
  // test kubelet: every exec shares the container's PID namespace and outlives its stream.
  it("kill() ends the command and every process it started, though closing the stream alone would not", async () => {
    await backend.provision(spec("kill-1"));
    await backend.awaitReady("kill-1", { timeoutMs: 60_000 });
    const processes = async () => (await run("kill-1", ["sh", "-c", PROCESS_LIST])).stdout.split("\n");

    // a tree that ignores SIGHUP, with a long timeout so only kill() can end it
    const session = await backend.exec("kill-1", {
      command: ["sh", "-c", "trap '' HUP; sleep 3401 & sleep 3402 & echo started; wait"],
      timeoutMs: 600_000,
    });
    const out = collect(session.stdout);
    void collect(session.stderr);
    await waitFor("the tree to start", async () => (await processes()).includes("sleep 3402"), 15_000);
    expect(await processes()).toEqual(expect.arrayContaining(["sleep 3401", "sleep 3402"]));

    const t0 = Date.now();
    session.kill();
    // settled once the processes are gone: kill() bounds its own work
    expect(await session.result).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: false });
    expect(Date.now() - t0).toBeLessThan(60_000); // the sleeps run for an hour; generous for a busy machine
    expect(await out).toBe("started\n");
    const left = (await processes()).filter((p) => /^sleep 340[12]$|sleep 3401 &/.test(p));
    expect(left, "processes of the killed exec").toEqual([]);

    // the sandbox goes on: a new exec works, and a timeout still kills its whole group
    expect(await run("kill-1", ["echo", "after the kill"])).toMatchObject({ stdout: "after the kill\n", exitCode: 0 });
    const timed = await run("kill-1", ["sh", "-c", "sleep 3403 & sleep 3404"], { timeoutMs: 1000 });
    expect(timed).toMatchObject({ exitCode: 124, timedOut: true, oomKilled: false });
    await waitFor(
      "the timed-out group to be gone",
      async () => !(await processes()).some((p) => /^sleep 340[34]$/.test(p)),
      10_000,
    );
    await backend.delete("kill-1");
  });

  it("a download abandoned midway, or an upload whose input fails, ends its tar in the sandbox", async () => {
    await backend.provision(spec("tar-1"));
    await backend.awaitReady("tar-1", { timeoutMs: 60_000 });
    const tars = async () =>
      (await run("tar-1", ["sh", "-c", PROCESS_LIST])).stdout.split("\n").filter((p) => /(^|\/)tar /.test(p));
    // 512 MiB (sparse: costs no disk): far more than the pipes and buffers on the way hold
    await run("tar-1", ["truncate", "-s", "512M", "/workspace/sparse.bin"]);
    const download = await backend.getArchive("tar-1", "/workspace");
    await new Promise<void>((resolve) => download.once("data", () => resolve()));
    download.pause();
    const buffersBefore = process.memoryUsage().arrayBuffers;
    // a reader that stops reading holds tar back (backpressure to the sandbox), not our memory
    // (without it the exec's output piles up here at the speed of the stream, 100+ MB in this time)
    await new Promise((r) => setTimeout(r, 3000));
    expect(await tars()).not.toEqual([]);
    expect(process.memoryUsage().arrayBuffers - buffersBefore).toBeLessThan(48 << 20);
    download.destroy();
    await waitFor("the abandoned download's tar to be gone", async () => (await tars()).length === 0, 15_000);

    const input = new PassThrough();
    const upload = backend.putArchive("tar-1", "/tmp/in", input);
    // the start of a real archive of a 1 MiB file: tar waits for the rest, then the source fails
    const dir = mkdtempSync(join(tmpdir(), "sbx-tar-"));
    writeFileSync(join(dir, "f.bin"), Buffer.alloc(1 << 20, 7));
    input.write(spawnSync("tar", ["-C", dir, "-cf", "-", "f.bin"]).stdout.subarray(0, 65536));
    await waitFor("the upload's tar to start", async () => (await tars()).length > 0, 15_000);
    input.destroy(new Error("registry went away"));
    await expect(upload).rejects.toThrow();
    await waitFor("the failed upload's tar to be gone", async () => (await tars()).length === 0, 15_000);
    await backend.delete("tar-1");
  });

  it("reports an OOM-killed container as Failed/OOMKilled while the pod phase still says Running", async () => {
    await backend.provision(spec("oom-1"));
    await backend.awaitReady("oom-1", { timeoutMs: 60_000 });
    const pod = await terminateContainer(clients.kc, ns.sandboxes, "oom-1", { container: SANDBOX_CONTAINER });
    expect(pod.status!.phase).toBe("Running");
    await waitFor("Failed", async () => (await backend.describe("oom-1"))?.phase === "Failed");
    expect(await backend.describe("oom-1")).toMatchObject({
      phase: "Failed",
      reason: "OOMKilled",
      exitCode: 137,
      ready: false,
    });
    expect(
      events.some(
        (e) =>
          e.type === "upsert" &&
          e.sandbox.id === "oom-1" &&
          e.sandbox.phase === "Failed" &&
          e.sandbox.reason === "OOMKilled",
      ),
    ).toBe(true);
    await expect(backend.awaitReady("oom-1", { timeoutMs: 1000 })).rejects.toMatchObject({
      code: "failed",
      details: { reason: "OOMKilled" },
    });
    await expect(backend.exec("oom-1", { command: ["true"] })).rejects.toMatchObject({ code: "failed" });
    // the terminal status is durable on the record
    await waitFor("status recorded", async () => {
      const c = await clients.custom.getNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        name: "oom-1",
      });
      return c.status?.phase === "Failed" && c.status?.reason === "OOMKilled" && c.status?.exitCode === 137;
    });
    await backend.delete("oom-1");
  });

  it("treats an externally deleted pod as the sandbox being gone", async () => {
    await backend.provision(spec("ext-1"));
    await backend.awaitReady("ext-1", { timeoutMs: 60_000 });
    await waitFor("Running recorded", async () => {
      const c = await clients.custom.getNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        name: "ext-1",
      });
      return c.status?.podName === "ext-1";
    });
    const { metadata } = await clients.core.readNamespacedPod({ name: "ext-1", namespace: ns.sandboxes });
    await clients.core.deleteNamespacedPod({ name: "ext-1", namespace: ns.sandboxes, gracePeriodSeconds: 0 });
    await waitFor("delete event", async () => events.some((e) => e.type === "delete" && e.id === "ext-1"), 30_000);
    expect(await backend.describe("ext-1")).toBeUndefined();
    const pods = await clients.core.listNamespacedPod({
      namespace: ns.sandboxes,
      labelSelector: `${LABELS.sandbox}=ext-1`,
    });
    expect(pods.items).toHaveLength(0); // not resurrected
    // and nothing of it runs on, as a kubelet kills a deleted pod's containers (issue 39: its
    // bubblewrap and `sleep` once outlived the suite); the test kubelet reconciles every 5 s
    const podDir = join(inject("podsDir"), metadata!.uid!);
    await waitFor("no process of the deleted pod", async () => processesUnder([podDir]).length === 0).catch(() => {
      throw new Error(`processes of the deleted pod ext-1 still run:\n${describeLeftovers(processesUnder([podDir]))}`);
    });
  });

  it("a wait on an unknown id answers NotFound", async () => {
    await expect(backend.awaitReady("never-created", { timeoutMs: 5000 })).rejects.toMatchObject({ code: "not_found" });
  });
});
