// Commands on a pseudo-terminal in a real local sandbox (issue 32, item 1), through the Manager:
// the helper opens the pty, the command leads its own session with the terminal as its
// controlling one, input echoes, a resize reaches `stty size`, a signal reaches the foreground
// job, and the cgroup and kill-the-whole-tree rules hold as for any command. Bad sizes are
// ValidationErrors naming the field.
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ValidationError } from "../../runtime/core/errors.ts";
import { type LocalRuntime, startLocalRuntime } from "../support/local.ts";
import { terminalScreen } from "../support/terminalScreen.ts";

let rt: LocalRuntime;
let id: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" } });
  id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

/** How many processes in the sandbox have `pattern` (a grep pattern that does not match itself) in their command line. */
async function running(pattern: string): Promise<number> {
  const ps = await rt.manager.exec("alice", id, {
    command: ["sh", "-c", `cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -o '${pattern}' | wc -l`],
  });
  let out = "";
  ps.stdout.on("data", (c: Buffer) => (out += c.toString()));
  await ps.result;
  return Number(out.trim());
}

async function openPty(command: string[], size = { cols: 100, rows: 30 }) {
  const stdin = new PassThrough();
  const session = await rt.manager.exec("alice", id, { command, stdin, pty: size });
  return { session, stdin, screen: terminalScreen(session.stdout) };
}

describe("a command on a pty", () => {
  it("has a controlling terminal at /dev/pts/N, its own session, TERM and the size asked for", async () => {
    const { session, screen } = await openPty(
      ["sh", "-c", 'tty; stty size; echo "TERM=$TERM"; test -t 0 && echo in-tty; ps -o sid=,pid= -p $$'],
      { cols: 123, rows: 45 },
    );
    const r = await session.result;
    expect(r.exitCode).toBe(0);
    expect(screen.text).toMatch(/\/dev\/pts\/\d+/);
    expect(screen.text).toContain("45 123");
    expect(screen.text).toContain("TERM=xterm-256color");
    expect(screen.text).toContain("in-tty");
    // the terminal turns \n into \r\n: one merged stream, as a terminal shows it
    expect(screen.text).toContain("\r\n");
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
    const r = await session.result;
    expect(r.exitCode).toBe(3);
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
    const sleepers = () => running("sleep 60[0]");
    const { session, stdin, screen } = await openPty(["bash", "--norc", "-i"]);
    stdin.write("(sleep 600 &) ; echo started-bg\n");
    await screen.waitFor(/started-bg\r?\n/);
    await expect.poll(sleepers, { timeout: 30_000 }).toBe(1);
    session.kill();
    const r = await session.result;
    expect(r.exitCode).not.toBe(0);
    await expect.poll(sleepers, { timeout: 30_000 }).toBe(0);
  });

  it.each([
    [{ cols: 0, rows: 24 }, "pty.cols"],
    [{ cols: 100_000, rows: 24 }, "pty.cols"],
    [{ cols: 80, rows: 0 }, "pty.rows"],
    [{ cols: 80.5, rows: 24 }, "pty.cols"],
  ])("a pty of %j is a ValidationError naming %s", async (pty, field) => {
    const err = await rt.manager.exec("alice", id, { command: ["true"], pty }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).details).toMatchObject({ field });
    expect((err as Error).message).toContain("from 1 to 1000");
  });
});
