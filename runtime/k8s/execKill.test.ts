import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import { silentLogger } from "../core/log.ts";
import type { ExecResult, ExecSession } from "../core/types.ts";
import { buildExecArgv } from "./execCommand.ts";
import { buildKillArgv, newExecId, resolveKilledResult, withProcessKill } from "./execKill.ts";

/** host PIDs whose command line is exactly `args` */
function pidsRunning(args: string): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").join(" ").trim() === args;
      } catch {
        return false;
      }
    })
    .map(Number);
}

async function until(what: string, ok: () => boolean, ms = 5_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) if (ok()) return;
  throw new Error(`timed out waiting for ${what}`);
}

describe("the kill script (real shell, this host's /proc)", () => {
  it("kills every marked process and timeout's whole group, and spares other execs", async () => {
    const cwd = mkdtempSync(join(tmpdir(), "sbx-kill-"));
    const victim = newExecId();
    const bystander = newExecId();
    // Durations unique to this run name its processes. The first ignores SIGHUP and drops
    // the marker but stays in timeout's process group.
    const n = 100_000 + Math.floor(Math.random() * 800_000);
    const [dropped, second, third, other] = [n, n + 1, n + 2, n + 3].map((d) => `sleep ${d}`);
    const tree = `trap "" HUP; (env -u SBX_EXEC_ID ${dropped}) & ${second} & ${third}; wait`;
    const run = (argv: string[]) => spawn(argv[0], argv.slice(1), { stdio: "ignore" });
    const a = run(buildExecArgv({ command: ["sh", "-c", tree], cwd }, {}, victim));
    const b = run(buildExecArgv({ command: other.split(" "), cwd }, {}, bystander));
    try {
      await until("the trees to start", () =>
        [dropped, second, third, other].every((c) => pidsRunning(c).length === 1),
      );
      const k = spawnSync(buildKillArgv(victim)[0], buildKillArgv(victim).slice(1), { encoding: "utf8" });
      expect(k.status, k.stderr).toBe(0);
      expect(k.stdout).toMatch(/^round 1 killed:( \d+)+\n$/);
      await until("the marked tree to die", () => [dropped, second, third].every((c) => pidsRunning(c).length === 0));
      expect(pidsRunning(other)).toHaveLength(1);
    } finally {
      // `timeout` leads each tree's process group
      for (const p of [a, b]) {
        try {
          process.kill(-p.pid!, "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
  });
});

describe("resolveKilledResult", () => {
  it.each([
    [
      "kill before any status, exec had a timeout",
      { exitCode: 124, timedOut: true, oomKilled: false, durationMs: 300 },
      1000,
      { exitCode: 137, timedOut: false, oomKilled: false, durationMs: 300 },
    ],
    [
      "kill before any status, no timeout",
      { exitCode: 137, timedOut: false, oomKilled: false, durationMs: 300 },
      undefined,
      { exitCode: 137, timedOut: false, oomKilled: false, durationMs: 300 },
    ],
    [
      "the timeout fired first",
      { exitCode: 124, timedOut: true, oomKilled: false, durationMs: 1000 },
      1000,
      { exitCode: 124, timedOut: true, oomKilled: false, durationMs: 1000 },
    ],
    [
      "the command had already exited",
      { exitCode: 3, timedOut: false, oomKilled: false, durationMs: 10 },
      1000,
      { exitCode: 3, timedOut: false, oomKilled: false, durationMs: 10 },
    ],
    [
      "a 137 status is the kill, not an OOM",
      { exitCode: 137, timedOut: false, oomKilled: true, durationMs: 10 },
      undefined,
      { exitCode: 137, timedOut: false, oomKilled: false, durationMs: 10 },
    ],
  ])("%s", (_, r, timeoutMs, want) => expect(resolveKilledResult(r, timeoutMs)).toEqual(want));
});

/** A session settled by the test: settle(r) or fail(e); kill() records the call. */
function fakeSession() {
  let settle!: (r: ExecResult) => void;
  const result = new Promise<ExecResult>((resolve) => (settle = resolve));
  const s = {
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    result,
    kills: 0,
    settle,
    kill: () => void s.kills++,
  };
  return s;
}
const finish = (s: ReturnType<typeof fakeSession>, r: ExecResult) => {
  s.stdout.end();
  s.stderr.end();
  s.settle(r);
};
const killedByStream: ExecResult = { exitCode: 124, timedOut: true, oomKilled: false, durationMs: 50 };

describe("withProcessKill", () => {
  const setup = (run: (argv: string[]) => Promise<ExecSession>) => {
    const clock = new ManualClock();
    const main = fakeSession();
    const session = withProcessKill(main, {
      execId: "0123456789abcdef",
      timeoutMs: 1000,
      run,
      clock,
      logger: silentLogger(),
      killTimeoutMs: 2000,
    });
    return { clock, main, session };
  };

  it("closes the stream, runs the kill exec once, and settles as killed after it", async () => {
    const killer = fakeSession();
    const calls: string[][] = [];
    const { main, session } = setup(async (argv) => {
      calls.push(argv);
      return killer;
    });
    let settled: ExecResult | undefined;
    void session.result.then((r) => (settled = r));
    session.kill();
    session.kill();
    expect(main.kills).toBe(1);
    expect(calls).toEqual([buildKillArgv("0123456789abcdef")]);
    finish(main, killedByStream);
    await new Promise((r) => setImmediate(r));
    expect(settled).toBeUndefined(); // still killing
    finish(killer, { exitCode: 0, timedOut: false, oomKilled: false, durationMs: 5 });
    expect(await session.result).toEqual({ exitCode: 137, timedOut: false, oomKilled: false, durationMs: 50 });
  });

  it("sweeps a timed-out command's processes before reporting the timeout", async () => {
    const killer = fakeSession();
    const calls: string[][] = [];
    const { main, session } = setup(async (argv) => {
      calls.push(argv);
      return killer;
    });
    let settled: ExecResult | undefined;
    void session.result.then((r) => (settled = r));
    const timedOut: ExecResult = { exitCode: 124, timedOut: true, oomKilled: false, durationMs: 1000 };
    finish(main, timedOut);
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual([buildKillArgv("0123456789abcdef")]);
    expect(settled).toBeUndefined(); // not before the kill exec is done
    finish(killer, { exitCode: 0, timedOut: false, oomKilled: false, durationMs: 5 });
    expect(await session.result).toEqual(timedOut);
  });

  it("runs no kill exec for a command that already ended", async () => {
    const calls: string[][] = [];
    const { main, session } = setup(async (argv) => {
      calls.push(argv);
      return fakeSession();
    });
    finish(main, { exitCode: 0, timedOut: false, oomKilled: false, durationMs: 5 });
    await session.result;
    session.kill();
    expect(calls).toEqual([]);
    expect(await session.result).toMatchObject({ exitCode: 0 });
  });

  it("never throws when the kill exec cannot start, and still settles", async () => {
    const { main, session } = setup(async () => {
      throw new Error("pod gone");
    });
    expect(() => session.kill()).not.toThrow();
    finish(main, killedByStream);
    expect(await session.result).toMatchObject({ exitCode: 137, timedOut: false });
  });

  it("gives up on a kill exec that hangs after killTimeoutMs and closes it", async () => {
    const killer = fakeSession();
    const { clock, main, session } = setup(async () => killer);
    session.kill();
    finish(main, killedByStream);
    await new Promise((r) => setImmediate(r));
    await clock.advance(2000);
    expect(await session.result).toMatchObject({ exitCode: 137 });
    expect(killer.kills).toBe(1);
  });
});
