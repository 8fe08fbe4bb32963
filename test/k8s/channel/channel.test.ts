// The command channel on the real test control plane: commands go over one long-lived exec
// into the pod (the helper in channel mode, its daemon holding the commands), many at once;
// a broken channel fails what it carried with a retryable error and the next call opens a new
// one; a pod where the helper cannot run still execs, over one websocket per command.
import { spawn } from "node:child_process";
import type { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { HTTP_STATUS, type SbxError } from "../../../runtime/core/errors.ts";
import type { ExecRequest } from "../../../runtime/core/types.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { SANDBOX_CONTAINER } from "../../../runtime/k8s/contract.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { terminateContainer, waitFor } from "../../support/cluster.ts";
import {
  startTestBackend,
  type TestBackend,
  type TestNamespaces,
  testPlatform,
  testSandboxSpec,
} from "../runtime/support.ts";

/** every process of the sandbox, one command line per line (as test/k8s/runtime/lifecycle.test.ts) */
const PROCESS_LIST = `for d in /proc/[0-9]*; do { tr '\\0' ' ' < "$d/cmdline"; } 2>/dev/null | sed 's/ $//'; echo; done`;

let t: TestBackend;
let clients: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;

async function collect(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks).toString("utf8");
}

async function run(b: KubernetesBackend, id: string, command: string[], extra: Partial<ExecRequest> = {}) {
  const s = await b.exec(id, { command, ...extra });
  const [stdout, stderr, result] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
  return { stdout, stderr, ...result };
}

async function ready(b: KubernetesBackend, id: string): Promise<void> {
  await b.provision(testSandboxSpec(config, id, { env: { FROM_RECORD: "record" } }));
  await b.awaitReady(id, { timeoutMs: 60_000 });
}

beforeAll(async () => {
  t = await startTestBackend("rt-chan");
  ({ clients, ns, config, backend } = t);
});

afterAll(async () => {
  await t?.close();
});

describe("command channel", () => {
  it("runs commands over one channel: output, exit codes, env, cwd, stdin, timeout and kill", async () => {
    await ready(backend, "ch-1");
    const r = await run(backend, "ch-1", ["sh", "-c", 'cat; echo "$FROM_RECORD $CALL $(pwd)"; echo e >&2; exit 4'], {
      env: { CALL: "call" },
      cwd: "/tmp",
      stdin: Buffer.from("in\n"),
    });
    expect(r).toMatchObject({ stdout: "in\nrecord call /tmp\n", stderr: "e\n", exitCode: 4, timedOut: false });
    expect((await backend.describe("ch-1"))?.commandChannel).toBe("helper");
    const channel = t.platform.testing.channels.pool.current("ch-1");
    expect(channel).toBeDefined();

    const timed = await run(backend, "ch-1", ["sh", "-c", "sleep 3405 & sleep 3406"], { timeoutMs: 1000 });
    expect(timed).toMatchObject({ exitCode: 124, timedOut: true, oomKilled: false });
    const tree = await backend.exec("ch-1", { command: ["sh", "-c", "setsid sleep 3407 & echo up; wait"] });
    const out = collect(tree.stdout);
    await new Promise((r) => tree.stdout.once("readable", r));
    tree.kill();
    expect(await tree.result).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: false });
    expect(await out).toBe("up\n");
    // the whole tree is gone, the setsid'd sleep too (it kept the command's marker)
    await waitFor(
      "the killed and timed-out trees to be gone",
      async () => {
        const left = (await run(backend, "ch-1", ["sh", "-c", PROCESS_LIST])).stdout
          .split("\n")
          .filter((l) => /sleep 340[567]/.test(l));
        // named in the timeout's message (waitFor keeps the last error), so a failure says what survived
        if (left.length) throw new Error(`still running: ${left.join(" | ")}`);
        return true;
      },
      10_000,
    );
    expect(t.platform.testing.channels.pool.current("ch-1"), "every command used the same channel").toBe(channel);
  });

  it("carries 200 concurrent commands, each with its own output and exit code", async () => {
    await ready(backend, "ch-200");
    await run(backend, "ch-200", ["true"]); // open the channel first, so all 200 share it
    const channel = t.platform.testing.channels.pool.current("ch-200");
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        run(backend, "ch-200", ["sh", "-c", `echo out-${i}; echo err-${i} >&2; exit $((${i} % 9))`]),
      ),
    );
    for (const [i, r] of results.entries())
      expect(r).toMatchObject({ stdout: `out-${i}\n`, stderr: `err-${i}\n`, exitCode: i % 9 });
    expect(t.platform.testing.channels.pool.current("ch-200")).toBe(channel);
  });

  it("leaves the channel's own directory out of archives of /tmp, so out of snapshots and downloads", async () => {
    await ready(backend, "ch-skip");
    await run(backend, "ch-skip", ["sh", "-c", "echo mine > /tmp/user-file"]); // opens the channel
    expect((await run(backend, "ch-skip", ["ls", "-A", "/tmp"])).stdout).toContain(".sbx-helper");
    const members = async (path: string) => {
      const tar = spawn("tar", ["-t", "-f", "-"], { stdio: ["pipe", "pipe", "inherit"] });
      const listing = collect(tar.stdout);
      (await backend.getArchive("ch-skip", path)).pipe(tar.stdin);
      return (await listing).split("\n");
    };
    // (an archive of / is refused here: the test kubelet's root is the host's, unreadable in parts;
    // runtime/k8s/archive.test.ts covers that member name)
    const names = await members("/tmp");
    expect(names, `${names.length} entries`).toContain("tmp/user-file");
    expect(names.filter((n) => n.includes(".sbx-helper"))).toEqual([]);
  });

  it("a killed channel process fails the call in flight, retryably; the next call opens a new channel", async () => {
    await ready(backend, "ch-break");
    await run(backend, "ch-break", ["true"]);
    const first = t.platform.testing.channels.pool.current("ch-break")!;
    const { channelPid } = await first.hello;
    const streaming = await backend.exec("ch-break", { command: ["sh", "-c", "echo begin; sleep 600"] });
    void collect(streaming.stdout);
    void collect(streaming.stderr);
    // kill the channel's process in the pod over a plain exec (the websocket path); a cold pod is named after its sandbox
    expect(await runWs("ch-break", ["kill", "-9", String(channelPid)])).toBe(0);
    const broke = await streaming.result.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(broke).toMatchObject({ code: "unavailable", retryAfterSeconds: 1, details: { retryable: true } });
    // what the service answers for it: 503 with Retry-After (runtime/server/app.ts), not a 502
    expect(HTTP_STATUS[(broke as SbxError).code]).toBe(503);
    expect(await run(backend, "ch-break", ["echo", "again"])).toMatchObject({ stdout: "again\n", exitCode: 0 });
    const second = t.platform.testing.channels.pool.current("ch-break")!;
    expect(second).not.toBe(first);

    // a dropped exec stream (the websocket closed under it) is the same to a caller
    const next = await backend.exec("ch-break", { command: ["sleep", "600"] });
    second.close("test dropped the websocket");
    await expect(next.result).rejects.toMatchObject({ details: { retryable: true } });
    expect(await run(backend, "ch-break", ["echo", "third"])).toMatchObject({ stdout: "third\n" });
    expect(t.platform.testing.channels.pool.current("ch-break")).not.toBe(second);
  });

  it("a command whose container is OOM-killed under it ends 137 with oomKilled, from the container status", async () => {
    await ready(backend, "ch-oom");
    const streaming = await backend.exec("ch-oom", { command: ["sh", "-c", "echo begin; sleep 600"] });
    const out = collect(streaming.stdout);
    void collect(streaming.stderr);
    await new Promise((r) => streaming.stdout.once("readable", r));
    expect(t.platform.testing.channels.pool.current("ch-oom"), "the command went over the channel").toBeDefined();
    // the test kubelet marks the container OOMKilled and kills its init: the PID namespace, the
    // helper's daemon and the command with it, so the channel breaks as on a node
    await terminateContainer(clients.kc, ns.sandboxes, "ch-oom", { container: SANDBOX_CONTAINER });
    expect(await streaming.result).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: true });
    expect(await out).toBe("begin\n");
    await waitFor("Failed", async () => (await backend.describe("ch-oom"))?.reason === "OOMKilled");
  });

  it("moves archives both ways over the channel when transfers are on", async () => {
    const transferPlatform = testPlatform(config, clients, {
      identity: "transfer-replica",
      commandChannel: { transfers: true },
    });
    const withTransfers = transferPlatform.backend;
    await withTransfers.start();
    try {
      await ready(backend, "ch-tar");
      await waitFor("the other replica to see it", async () => !!(await withTransfers.describe("ch-tar"))?.ready);
      await run(withTransfers, "ch-tar", [
        "sh",
        "-c",
        "mkdir -p /tmp/src && head -c 3000000 /dev/urandom > /tmp/src/blob",
      ]);
      const sum = async (path: string) =>
        (await run(withTransfers, "ch-tar", ["sha256sum", path])).stdout.split(" ")[0];
      const tar = await withTransfers.getArchive("ch-tar", "/tmp/src");
      await withTransfers.putArchive("ch-tar", "/workspace/copy", tar);
      expect(await sum("/workspace/copy/src/blob")).toBe(await sum("/tmp/src/blob"));
      const channel = transferPlatform.testing.channels.pool.current("ch-tar");
      expect(channel, "the transfers used the channel").toBeDefined();
      expect((await channel!.list()).filter((c) => c.exit === "exit:0").length).toBeGreaterThanOrEqual(4);
    } finally {
      await withTransfers.close();
    }
  });

  it("falls back to one exec per command where the helper cannot run, and says so in the status", async () => {
    // /proc is no place for a directory: as in an image with a read-only or noexec /tmp
    const fallbackPlatform = testPlatform(config, clients, {
      identity: "fallback-replica",
      commandChannel: { dir: "/proc/sbx-helper-cannot-be-here" },
    });
    const fallback = fallbackPlatform.backend;
    await fallback.start();
    try {
      await ready(backend, "ch-fallback");
      await waitFor("the other replica to see it", async () => !!(await fallback.describe("ch-fallback"))?.ready);
      const r = await run(fallback, "ch-fallback", ["sh", "-c", "echo $FROM_RECORD; exit 5"]);
      expect(r).toMatchObject({ stdout: "record\n", exitCode: 5 });
      expect((await fallback.describe("ch-fallback"))?.commandChannel).toBe("exec");
      expect(fallbackPlatform.testing.channels.pool.current("ch-fallback")).toBeUndefined();
    } finally {
      await fallback.close();
    }
  });
});

/** a command over its own websocket exec, bypassing the channel */
async function runWs(pod: string, argv: string[]): Promise<number> {
  const { podRunner } = await import("../../../runtime/k8s/podExec.ts");
  const { systemClock } = await import("../../../runtime/core/clock.ts");
  const s = await podRunner(clients.kc, ns.sandboxes, systemClock)(pod, argv);
  s.stdout.resume();
  s.stderr.resume();
  return (await s.result).exitCode;
}
