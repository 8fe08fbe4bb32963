// exec, logs and tar streams go through the real API server to sbx-kubelet, which runs each
// container's main process in a bubblewrap sandbox and every exec in that sandbox's namespaces.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { CoreV1Api, Exec, type KubeConfig, type V1Status } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  createNamespace,
  execInPod,
  kubectl,
  loadKubeConfig,
  podManifest,
  runPod,
  type TestNamespace,
  terminateContainer,
  waitFor,
} from "../../support/cluster.ts";

/** How many host processes' command lines pass `match` (e.g. name a pod's directory, as its sandboxed main process does). */
function hostProcesses(match: (cmdline: string) => boolean): number {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return match(readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").join(" ").trim());
      } catch {
        return false;
      }
    }).length;
}
const processesUsing = (dir: string) => hostProcesses((c) => c.includes(dir));

/** The command lines of every process a command in `pod` can see, as `ps` would list them. */
async function processesSeenIn(pod: string): Promise<string[]> {
  const script = `for d in /proc/[0-9]*; do { tr '\\0' ' ' < "$d/cmdline"; } 2>/dev/null | sed 's/ $//'; echo; done`;
  const r = await execInPod(kc, ns.name, pod, ["sh", "-c", script]);
  return r.stdout.toString().split("\n").filter(Boolean);
}

/** Starts an exec over websocket and returns its socket, without waiting for the command. */
async function startExec(pod: string, command: string[]): Promise<{ close(): void }> {
  const sink = new PassThrough().resume();
  return (await new Exec(kc).exec(ns.name, pod, "main", command, sink, sink, null, false)) as unknown as {
    close(): void;
  };
}

let kc: KubeConfig;
let ns: TestNamespace;
let core: CoreV1Api;

beforeAll(async () => {
  kc = loadKubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  ns = await createNamespace(kc, "exec");
  await Promise.all([
    runPod(kc, ns.name, podManifest("a", { emptyDirs: { cache: "/cache" } })),
    runPod(kc, ns.name, podManifest("b", { emptyDirs: { cache: "/cache" } })),
  ]);
});

afterAll(async () => {
  await ns?.delete();
});

describe("exec through the API server", () => {
  const script = "echo out; echo err >&2; exit 3";

  it("returns stdout, stderr and a non-zero exit code over websocket (v5.channel.k8s.io)", async () => {
    const r = await execInPod(kc, ns.name, "a", ["sh", "-c", script]);
    expect({ out: r.stdout.toString(), err: r.stderr, code: r.exitCode }).toEqual({
      out: "out\n",
      err: "err\n",
      code: 3,
    });
    expect(r.status.reason).toBe("NonZeroExitCode");
    expect(r.protocol).toBe("v5.channel.k8s.io");
  });

  it("reports success with exit code 0", async () => {
    const r = await execInPod(kc, ns.name, "a", ["sh", "-c", "printf ok"]);
    expect({ out: r.stdout.toString(), code: r.exitCode, status: r.status.status }).toEqual({
      out: "ok",
      code: 0,
      status: "Success",
    });
  });

  it("returns stdout, stderr and the exit code over SPDY (kubectl exec)", async () => {
    const r = await kubectl(["exec", "-n", ns.name, "a", "--", "sh", "-c", script]);
    expect(r.code).toBe(3);
    expect(r.stdout.toString()).toBe("out\n");
    expect(r.stderr).toContain("err\n");
  });

  it("passes stdin through and delivers its end (cat terminates)", async () => {
    const r = await execInPod(kc, ns.name, "a", ["sh", "-c", "cat | wc -c"], "twelve bytes");
    expect(r.stdout.toString().trim()).toBe("12");
  });

  it("allocates a terminal when asked (tty=true)", async () => {
    const out = new PassThrough();
    const chunks: Buffer[] = [];
    out.on("data", (c: Buffer) => chunks.push(c));
    const status = await new Promise<V1Status>((resolve, reject) => {
      new Exec(kc)
        .exec(ns.name, "a", "main", ["sh", "-c", "test -t 1 && echo has-tty"], out, null, null, true, resolve)
        .catch(reject);
    });
    expect(status.status).toBe("Success");
    expect(Buffer.concat(chunks).toString()).toBe("has-tty\r\n"); // the terminal's ONLCR turns \n into \r\n
  });

  it("keeps each pod's files to itself and the host read-only", async () => {
    for (const path of ["/workspace/secret", "/tmp/secret", "/cache/secret"]) {
      const w = await execInPod(kc, ns.name, "a", ["sh", "-c", `echo a-only > ${path} && cat ${path}`]);
      expect(w.stdout.toString()).toBe("a-only\n");
      const r = await execInPod(kc, ns.name, "b", ["test", "-e", path]);
      expect(r.exitCode, `${path} written in pod a must not exist in pod b`).toBe(1);
    }
    const again = await execInPod(kc, ns.name, "a", ["cat", "/workspace/secret"]);
    expect(again.stdout.toString()).toBe("a-only\n");
    const host = await execInPod(kc, ns.name, "a", ["sh", "-c", "touch /usr/sbx-should-fail"]);
    expect(host.exitCode).not.toBe(0);
    expect(host.stderr).toMatch(/Read-only file system/);
  });

  it("streams a tar archive into a pod and back out, byte-identical files", async () => {
    const src = mkdtempSync(join(tmpdir(), "sbx-tar-src-"));
    const dst = mkdtempSync(join(tmpdir(), "sbx-tar-dst-"));
    try {
      mkdirSync(join(src, "proj/sub"), { recursive: true });
      const binary = Buffer.from(Array.from({ length: 3_000_000 }, (_, i) => (i * 31 + (i >> 12)) % 256));
      writeFileSync(join(src, "proj/data.bin"), binary);
      writeFileSync(join(src, "proj/sub/readme.txt"), "hello tar\n");
      const archive = spawnSync("tar", ["-cf", "-", "-C", src, "proj"], { maxBuffer: 64 << 20 }).stdout;

      const put = await execInPod(kc, ns.name, "a", ["tar", "-xf", "-", "-C", "/workspace"], archive);
      expect(put.exitCode, put.stderr).toBe(0);
      const got = await execInPod(kc, ns.name, "a", ["tar", "-cf", "-", "-C", "/workspace", "proj"]);
      expect(got.exitCode, got.stderr).toBe(0);
      spawnSync("tar", ["-xf", "-", "-C", dst], { input: got.stdout, maxBuffer: 64 << 20 });
      expect(readFileSync(join(dst, "proj/data.bin")).equals(binary)).toBe(true);
      expect(readFileSync(join(dst, "proj/sub/readme.txt"), "utf8")).toBe("hello tar\n");

      // The same through kubectl (SPDY), into the other pod.
      const spdy = await kubectl(
        ["exec", "-i", "-n", ns.name, "b", "--", "tar", "-xf", "-", "-C", "/workspace"],
        archive,
      );
      expect(spdy.code, spdy.stderr).toBe(0);
      const sum = await execInPod(kc, ns.name, "b", ["sh", "-c", "wc -c < /workspace/proj/data.bin"]);
      expect(sum.stdout.toString().trim()).toBe(String(binary.length));
    } finally {
      rmSync(src, { recursive: true, force: true });
      rmSync(dst, { recursive: true, force: true });
    }
  });
});

describe("processes, as in a container", () => {
  it("runs every exec of a pod in the PID namespace of its main process, apart from other pods", async () => {
    const stream = await startExec("a", ["sh", "-c", "exec sleep 3301"]);
    try {
      await waitFor("the first exec to be visible from a second one", async () =>
        (await processesSeenIn("a")).includes("sleep 3301"),
      );
      const seen = await processesSeenIn("a");
      expect(seen).toContain("sleep infinity"); // the pod's main process
      expect(seen.filter((p) => /^\S*bwrap /.test(p))).toHaveLength(1); // the sandbox's init, PID 1
      expect(await processesSeenIn("b")).not.toContain("sleep 3301");
      const host = await execInPod(kc, ns.name, "a", ["cat", "/proc/sys/kernel/hostname"]);
      expect(host.stdout.toString()).toBe("a\n");
    } finally {
      stream.close();
      await execInPod(kc, ns.name, "a", ["sh", "-c", "pkill -KILL -x -f 'sleep 3301' || true"]);
    }
  });

  it("leaves a command running when its exec stream closes, as a kubelet with containerd does", async () => {
    const stream = await startExec("a", ["sh", "-c", "trap '' HUP; sleep 3302 & wait"]);
    await waitFor("the command to start", async () => (await processesSeenIn("a")).includes("sleep 3302"));
    stream.close();
    await new Promise((r) => setTimeout(r, 1_500));
    const seen = await processesSeenIn("a");
    expect(seen, "closing the stream must not end the command").toContain("sleep 3302");
    const killed = await execInPod(kc, ns.name, "a", ["sh", "-c", "pkill -KILL -f 'sleep 330[2]'"]);
    expect(killed.exitCode).toBe(0);
    await waitFor("the command to be gone", async () => !(await processesSeenIn("a")).includes("sleep 3302"));
  });

  it("gives execs the container's env and workingDir, as its main process has them", async () => {
    const pod = podManifest("envwd", {
      command: ["sh", "-c", 'echo "main: $GREETING $PWD $HOSTNAME"; exec sleep infinity'],
    });
    Object.assign(pod.spec!.containers[0], {
      env: [{ name: "GREETING", value: "hi there" }],
      workingDir: "/workspace",
    });
    await runPod(kc, ns.name, pod);
    const r = await execInPod(kc, ns.name, "envwd", ["sh", "-c", 'echo "exec: $GREETING $PWD $HOSTNAME"']);
    expect(r.stdout.toString()).toBe("exec: hi there /workspace envwd\n");
    await waitFor(
      "the main process's line",
      async () => (await core.readNamespacedPodLog({ name: "envwd", namespace: ns.name })).length > 0,
    );
    expect(await core.readNamespacedPodLog({ name: "envwd", namespace: ns.name })).toBe(
      "main: hi there /workspace envwd\n",
    );
  });

  it("gives each exec its own process group: `kill -9 0` ends only that exec", async () => {
    const r = await execInPod(kc, ns.name, "a", ["sh", "-c", "kill -9 0"]);
    expect(r.exitCode).toBe(137);
    expect((await execInPod(kc, ns.name, "a", ["echo", "still serving"])).stdout.toString()).toBe("still serving\n");
  });

  it("shares the container's root between execs, as one container filesystem", async () => {
    await execInPod(kc, ns.name, "a", ["sh", "-c", "mkdir -p /scratch && echo shared > /scratch/f"]);
    expect((await execInPod(kc, ns.name, "a", ["cat", "/scratch/f"])).stdout.toString()).toBe("shared\n");
    expect((await execInPod(kc, ns.name, "b", ["test", "-e", "/scratch/f"])).exitCode).toBe(1);
  });
});

describe("logs and lifecycle", () => {
  it("serves the main process's output as the container log", async () => {
    await runPod(
      kc,
      ns.name,
      podManifest("logger", { command: ["sh", "-c", "echo hello-from-main; echo on-stderr >&2; sleep infinity"] }),
    );
    let log = "";
    await waitFor("the container log", async () => {
      log = await core.readNamespacedPodLog({ name: "logger", namespace: ns.name });
      return log.includes("on-stderr");
    });
    expect(log).toBe("hello-from-main\non-stderr\n");
    const tail = await kubectl(["logs", "-n", ns.name, "logger", "--tail=1"]);
    expect(tail.stdout.toString()).toBe("on-stderr\n");
  });

  it("removes a pod's directory when the pod is deleted", async () => {
    const pod = await runPod(kc, ns.name, podManifest("ephemeral"));
    await execInPod(kc, ns.name, "ephemeral", ["sh", "-c", "echo x > /workspace/f"]);
    const dir = join(inject("podsDir"), pod.metadata!.uid!);
    expect(existsSync(join(dir, "paths/workspace/f"))).toBe(true);
    await core.deleteNamespacedPod({ name: "ephemeral", namespace: ns.name });
    await waitFor("the pod directory to be removed", async () => !existsSync(dir));
  });

  it("terminates a container as OOMKilled/137 while the pod phase stays Running, and refuses exec into it", async () => {
    const running = await runPod(kc, ns.name, podManifest("oom"));
    const podDir = join(inject("podsDir"), running.metadata!.uid!);
    await waitFor("the main process to start", async () => processesUsing(podDir) > 0);
    // an exec left running ends with its container, as every process of a PID namespace does with its init
    const lingering = `sleep ${100_000 + Math.floor(Math.random() * 800_000)}`; // unique on this host
    const stream = await startExec("oom", lingering.split(" "));
    await waitFor("the exec to start", async () => hostProcesses((c) => c === lingering) === 1);
    stream.close();
    const pod = await terminateContainer(kc, ns.name, "oom");
    await waitFor("the main process to be killed", async () => processesUsing(podDir) === 0);
    await waitFor("the exec to end with its container", async () => hostProcesses((c) => c === lingering) === 0);
    const state = pod.status!.containerStatuses![0].state!;
    expect(pod.status!.phase).toBe("Running");
    expect(state.terminated).toMatchObject({ reason: "OOMKilled", exitCode: 137 });
    const r = await kubectl(["exec", "-n", ns.name, "oom", "--", "true"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/not running \(terminated: OOMKilled, exit code 137\)/);
  });
});
