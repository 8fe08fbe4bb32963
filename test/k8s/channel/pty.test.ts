// Commands on a pseudo-terminal on the real test control plane (issue 32, item 1, Kubernetes):
// the pod's helper daemon opens the pty, the command leads its own session with the terminal as
// its controlling one, input echoes, a resize reaches `stty size`, a signal reaches the
// foreground job, kill ends the whole tree, a timeout still holds, and a second reader attached
// by id (as another replica would) sees new output and can type, resize and kill. A pod whose
// daemon predates terminals refuses a pty start by name and runs nothing.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { ConflictError } from "../../../runtime/core/errors.ts";
import type { ExecRequest, ExecSession } from "../../../runtime/core/types.ts";
import { loadHelperBinary, openPodChannel } from "../../../runtime/k8s/channel/open.ts";
import { podRunner } from "../../../runtime/k8s/podExec.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { terminalScreen } from "../../support/terminalScreen.ts";
import { startTestBackend, type TestBackend, testSandboxSpec } from "../runtime/support.ts";

/** the daemon's sources before terminals (the commit that merged local ptys): what older pods run */
const BEFORE_PTYS = "01680aa";

let t: TestBackend;
let config: RuntimeConfig;
let backend: KubernetesBackend;

beforeAll(async () => {
  t = await startTestBackend("rt-pty");
  ({ config, backend } = t);
  await backend.provision(testSandboxSpec(config, "pty-1"));
  await backend.awaitReady("pty-1", { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await t?.close();
});

async function openPty(command: string[], extra: Partial<ExecRequest> = {}, id = "pty-1") {
  const stdin = new PassThrough();
  const session = await backend.exec(id, { command, stdin, pty: { cols: 100, rows: 30 }, ...extra });
  let stderr = "";
  session.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  return { session, stdin, screen: terminalScreen(session.stdout), stderr: () => stderr };
}

async function output(command: string[]): Promise<string> {
  const s = await backend.exec("pty-1", { command });
  let out = "";
  s.stdout.on("data", (c: Buffer) => (out += c.toString()));
  s.stderr.resume();
  await s.result;
  return out;
}

/** how many processes of the pod run `pattern` (a [0] in it keeps the grep itself out) */
const running = async (pattern: string) =>
  Number((await output(["sh", "-c", `cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -o '${pattern}' | wc -l`])).trim());
const sleepers = () => running("sleep 60[0]");

describe("a command on a pty on Kubernetes", () => {
  it("has a controlling terminal at /dev/pts/N, TERM, the size asked for, one stream, the pod's cgroup", async () => {
    const { session, screen, stderr } = await openPty(
      ["sh", "-c", 'tty; stty size; echo "TERM=$TERM"; test -t 0 && echo in-tty; cat /proc/self/cgroup'],
      { pty: { cols: 123, rows: 45 } },
    );
    const r = await session.result;
    expect(r.exitCode).toBe(0);
    expect(screen.text).toMatch(/\/dev\/pts\/\d+/);
    expect(screen.text).toContain("45 123");
    expect(screen.text).toContain("TERM=xterm-256color");
    expect(screen.text).toContain("in-tty");
    expect(screen.text).toContain("\r\n"); // the terminal turns \n into \r\n
    expect(stderr()).toBe("");
    // the same cgroup as a command on pipes: the pod's limits hold for it unchanged
    const cgroup = (await output(["cat", "/proc/self/cgroup"])).trim();
    expect(screen.text.replaceAll("\r", "")).toContain(cgroup);
  });

  it("an interactive shell echoes input, sees a resize, and exits with its code", async () => {
    const { session, stdin, screen } = await openPty(["bash", "--norc", "-i"]);
    stdin.write("echo hello-$((6*7))\n");
    await screen.waitFor(/hello-42/);
    expect(screen.text).toContain("echo hello-$((6*7))"); // the terminal echoed what was typed
    session.resize!({ cols: 77, rows: 22 });
    stdin.write("stty size\n");
    await screen.waitFor(/22 77/);
    stdin.write("exit 3\n");
    expect((await session.result).exitCode).toBe(3);
  });

  it("a signal reaches the foreground job, not the shell", async () => {
    const { session, stdin, screen } = await openPty(["bash", "--norc", "-i"]);
    stdin.write("sleep 300\n");
    // bash's child takes the terminal's foreground before it execs sleep: once sleep runs, it is in front
    await expect.poll(() => running("sleep 30[0]"), { timeout: 30_000 }).toBe(1);
    session.signal!(2);
    stdin.write("echo after-sleep-$?\n");
    await screen.waitFor(/after-sleep-130/);
    stdin.write("exit 0\n");
    expect((await session.result).exitCode).toBe(0);
  });

  it("kill ends the whole tree, background jobs on the terminal too", async () => {
    const { session, stdin, screen } = await openPty(["bash", "--norc", "-i"]);
    stdin.write("(sleep 600 &) ; echo started-bg\n");
    await screen.waitFor(/started-bg\r?\n/);
    // the background job may not have exec'd sleep yet when the echo comes (seen at load 10)
    await expect.poll(sleepers, { timeout: 30_000 }).toBe(1);
    session.kill();
    expect((await session.result).exitCode).not.toBe(0);
    expect(await sleepers()).toBe(0);
  });

  it("a timeout kills a command on a pty as on pipes", async () => {
    const { session } = await openPty(["sleep", "600"], { timeoutMs: 1_000 });
    const r = await session.result;
    expect(r).toMatchObject({ exitCode: 124, timedOut: true });
  });

  it("a reader attached by id takes the terminal: new output, input, resize and kill", async () => {
    const { session, stdin } = await openPty(["bash", "--norc", "-i"]);
    const commandId = (session as ExecSession & { commandId: string }).commandId;
    expect(commandId).toBeTruthy();
    stdin.write("echo first-$((1+1))\n");
    const firstReader = session.result.then(
      () => "ended",
      (e: Error) => e.message,
    );
    const input = new PassThrough();
    const again = (await backend.commands!.attach("pty-1", commandId, input))!;
    expect(await firstReader).toContain("attached by another reader");
    const seen = terminalScreen(again.stdout);
    await seen.waitFor(/first-2/); // the ring replays what came before the attach
    input.write("echo again-$((2+3))\n");
    await seen.waitFor(/again-5/);
    again.resize!({ cols: 61, rows: 19 });
    input.write("stty size\n");
    await seen.waitFor(/19 61/);
    again.kill();
    expect((await again.result).exitCode).not.toBe(0);
  });
});

describe("a pod whose daemon predates terminals", () => {
  it("refuses a pty start by name and runs nothing; commands on pipes still run", async () => {
    await backend.provision(testSandboxSpec(config, "pty-old"));
    await backend.awaitReady("pty-old", { timeoutMs: 60_000 });
    // the older helper, built from the sources before terminals, starts the pod's daemon first
    const dir = mkdtempSync(path.join(tmpdir(), "sbx-old-helper-"));
    const sources = ["sbx-helper.c", "seccomp.c", "port-relay.c", "channel.c", "daemon.c", "registry.c", "ring.c"];
    sources.push("blob.c", "sha256.c");
    for (const f of [...sources, "seccomp.h", "port-relay.h", "channel.h", "registry.h", "blob.h", "sha256.h"])
      writeFileSync(path.join(dir, f), execFileSync("git", ["show", `${BEFORE_PTYS}:tools/local-helper/${f}`]));
    const out = path.join(dir, "sbx-helper");
    execFileSync("gcc", ["-O2", "-static", "-w", "-o", out, ...sources.map((f) => path.join(dir, f))]);
    const old = await loadHelperBinary(out);
    rmSync(dir, { recursive: true, force: true }); // the binary is in memory now
    const runInPod = podRunner(t.clients.kc, t.ns.sandboxes, systemClock);
    const opened = await openPodChannel({ runInPod, helper: async () => old, clock: systemClock }, "pty-old");
    if (!("channel" in opened)) throw new Error(`the old helper's channel did not open: ${opened.fallback}`);
    const marker = "pty-old-ran";
    const err = await backend
      .exec("pty-old", { command: ["sh", "-c", `echo > /tmp/${marker}`], pty: { cols: 80, rows: 24 } })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as Error).message).toMatch(/daemon from before terminals.*pause and resume the sandbox/);
    const check = await backend.exec("pty-old", {
      command: ["sh", "-c", `test -e /tmp/${marker} && echo ran || echo not-run`],
    });
    let seen = "";
    check.stdout.on("data", (c: Buffer) => (seen += c.toString()));
    expect((await check.result).exitCode).toBe(0);
    expect(seen.trim()).toBe("not-run");
    opened.channel.close();
  }, 180_000);
});
