// The E2B SDK's pty scenarios, run unchanged on both platforms (test/e2b/envd-pty.test.ts locally,
// test/k8s/e2b/pty.test.ts on the test cluster), so the two platforms are held to the same behaviour.
import type { CommandHandle, Sandbox } from "e2b";
import { expect } from "vitest";
import { type TerminalScreen, terminalScreen } from "./terminalScreen.ts";

const type = (sbx: Sandbox, pid: number, s: string) => sbx.pty.sendInput(pid, new TextEncoder().encode(s));

/** pty.create runs `bash -i` on /dev/pts/N with envs and cwd; input echoes; resize shows in `stty size`; kill ends it. */
export async function ptyCreateResizeKill(sbx: Sandbox): Promise<CommandHandle> {
  const t = terminalScreen();
  const h = await sbx.pty.create({ cols: 100, rows: 30, onData: t.onData, envs: { PTY_MARK: "m-1" }, cwd: "/tmp" });
  await type(sbx, h.pid, 'tty; echo "$PTY_MARK $TERM $(pwd) $-"\n');
  await t.waitFor(/\/dev\/pts\/\d+/);
  const m = await t.waitFor(/m-1 (\S+) (\S+) (\S+)/);
  expect(m[1]).toBe("xterm-256color");
  expect(m[2]).toBe("/tmp");
  expect(m[3]).toContain("i"); // an interactive shell
  expect(t.text).toContain('echo "$PTY_MARK'); // the terminal echoed what was typed
  await type(sbx, h.pid, "stty size\n");
  await t.waitFor(/30 100/);
  await sbx.pty.resize(h.pid, { cols: 91, rows: 17 });
  await type(sbx, h.pid, "stty size\n");
  await t.waitFor(/17 91/);
  expect(await sbx.pty.kill(h.pid)).toBe(true);
  const r = await h.wait().catch((e: unknown) => e);
  expect(r).toMatchObject({ exitCode: -1 });
  return h;
}

/**
 * A pty outlives the request that started it: after the Start stream is dropped, pty.connect by
 * pid shows new output, and `exit 7` ends it with 7. Answers the first request's screen.
 */
export async function ptyReconnect(sbx: Sandbox): Promise<TerminalScreen> {
  const first = terminalScreen();
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData, timeoutMs: 120_000 });
  await type(sbx, h.pid, "echo before-$((40+2))\n");
  await first.waitFor(/before-42/);
  await h.disconnect(); // the Start stream ends; the pty goes on
  expect((await sbx.commands.list()).some((p) => p.pid === h.pid)).toBe(true);
  const second = terminalScreen();
  const again = await sbx.pty.connect(h.pid, { onData: second.onData, timeoutMs: 120_000 });
  await type(sbx, h.pid, "echo after-$((50+5))\n");
  await second.waitFor(/after-55/);
  await type(sbx, h.pid, "exit 7\n");
  const r = await again.wait().catch((e: unknown) => e);
  expect(r).toMatchObject({ exitCode: 7 });
  return first;
}
