// How many channel opens a replica runs at once (commandChannel.maxOpens): each open is up to
// three short-lived exec websockets, and a fleet's first commands all at once left 236 KiB of
// RSS per channel behind where 32 at a time left 109 (docs/benchmarks.md). The "pods" are
// this machine: the real sh and the real helper run the open scripts; each pod's first exec is
// held until the test lets it go, so the test sees which opens started.
import { spawn } from "node:child_process";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import { silentLogger } from "../../core/log.ts";
import type { ExecResult, ExecSession } from "../../core/types.ts";
import type { RunInPod } from "../podExec.ts";
import { createSandboxChannels } from "./sandboxChannels.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper;

beforeAll(async () => {
  local = await startLocalHelper("sbx-opens-");
}, 120_000);

afterAll(() => local?.close());

function runHere(argv: string[], stdin?: Uint8Array | Readable): ExecSession {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
  child.stdin.on("error", () => undefined);
  if (stdin instanceof Readable) stdin.pipe(child.stdin);
  else child.stdin.end(stdin ?? Buffer.alloc(0));
  const result = new Promise<ExecResult>((resolve) =>
    child.on("close", (code) => resolve({ exitCode: code ?? 137, timedOut: false, oomKilled: false, durationMs: 0 })),
  );
  return { stdout: child.stdout, stderr: child.stderr, result, kill: () => child.kill("SIGKILL") };
}

async function until(what: string, probe: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !probe(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!probe()) throw new Error(`timed out waiting for ${what}`);
  await new Promise((r) => setTimeout(r, 50)); // and nothing more starts meanwhile
}

describe("channel opens", () => {
  it("runs at most maxOpens at once; the others wait for a slot, then open", async () => {
    const started: string[] = [];
    const release = new Map<string, () => void>();
    const runInPod: RunInPod = async (pod, argv, stdin) => {
      if (!release.has(pod)) {
        started.push(pod);
        await new Promise<void>((r) => release.set(pod, r));
      }
      return runHere(argv, stdin);
    };
    const channels = createSandboxChannels({
      runInPod,
      clock: systemClock,
      logger: silentLogger(),
      fallbackRunner: () => {
        throw new Error("no pod here falls back");
      },
      options: { maxOpens: 2, helperPath: local.binary, dir: local.dir },
    });
    const pods = ["p0", "p1", "p2", "p3", "p4", "p5"];
    const outputs = pods.map(async (pod, i) => {
      const s = await channels.exec(`s${i}`, pod, { command: ["echo", pod], cwd: "/" }, {});
      if (!s) throw new Error(`${pod} fell back`);
      s.stderr.resume();
      let out = "";
      for await (const c of s.stdout) out += c;
      return `${out}${(await s.result).exitCode}`;
    });
    await until("two opens", () => started.length >= 2);
    expect(started).toEqual(["p0", "p1"]);
    release.get("p0")?.();
    await until("a third open", () => started.length >= 3);
    expect(started).toEqual(["p0", "p1", "p2"]);
    for (let next = 1; next < pods.length; next++) {
      await until(`${pods[next]} to start`, () => started.length > next);
      release.get(pods[next])?.();
    }
    expect(await Promise.all(outputs)).toEqual(pods.map((p) => `${p}\n0`));
    // every channel reaches the one daemon of this directory; it outlives channels by design
    const daemon = (await channels.pool.current("s0")?.hello)?.daemonPid;
    channels.close();
    if (daemon) process.kill(daemon, "SIGKILL");
  });
});
