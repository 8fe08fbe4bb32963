// openPodChannel's decisions against a "pod" that is this machine: argv runs locally through the
// real sh and the real helper, so the copy-in and channel scripts are the ones pods run. One
// session's result can be made to reject, as a websocket exec whose status a TCP reset lost.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import { UpstreamError } from "../../core/errors.ts";
import type { ExecResult, ExecSession } from "../../core/types.ts";
import type { RunInPod } from "../podExec.ts";
import { type HelperBinary, loadHelperBinary, openPodChannel } from "./open.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper;
let helper: HelperBinary;

beforeAll(async () => {
  local = await startLocalHelper("sbx-open-");
  helper = await loadHelperBinary(local.binary);
}, 120_000);

afterAll(() => local?.close());

/** Runs argv here; `lose(argv)` true makes that session's result reject once the command ended. */
function localPod(lose: (argv: string[]) => boolean = () => false): RunInPod & { killAll(): void } {
  const children: ReturnType<typeof spawn>[] = [];
  const run = async (_pod: string, argv: string[], stdin?: Uint8Array | Readable): Promise<ExecSession> => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    children.push(child);
    child.stdin.on("error", () => undefined); // a shell that exited before reading all its input
    if (stdin instanceof Readable) stdin.pipe(child.stdin);
    else child.stdin.end(stdin ?? Buffer.alloc(0));
    const result = new Promise<ExecResult>((resolve, reject) =>
      child.on("close", (code) =>
        lose(argv)
          ? reject(new UpstreamError("exec in pod p: the stream closed before the exit status arrived"))
          : resolve({ exitCode: code ?? 137, timedOut: false, oomKilled: false, durationMs: 0 }),
      ),
    );
    result.catch(() => undefined);
    return { stdout: child.stdout, stderr: child.stderr, result, kill: () => child.kill("SIGKILL") };
  };
  const killAll = () => {
    for (const c of children) c.kill("SIGKILL");
  };
  return Object.assign(run, { killAll });
}

const isUpload = (argv: string[]) => argv.includes("sbx-upload");

describe("openPodChannel", () => {
  it("falls back, rather than failing the caller's command, when an upload's status is lost", async () => {
    const pod = localPod(isUpload);
    // a directory that cannot be made: the shell exits at once, while the binary is still sent
    const out = await openPodChannel(
      { runInPod: pod, helper: async () => helper, clock: systemClock, dir: "/proc/sbx-helper-here" },
      "p",
    );
    expect(out).toEqual({
      fallback:
        "copying the helper into /proc/sbx-helper-here failed: exec in pod p: the stream closed before the exit status arrived",
    });
    pod.killAll();
  });

  it("uses the copy when the upload's status was lost but the helper landed", async () => {
    const pod = localPod(isUpload);
    const out = await openPodChannel(
      { runInPod: pod, helper: async () => helper, clock: systemClock, dir: join(local.root, "landed") },
      "p",
    );
    expect("channel" in out, JSON.stringify(out)).toBe(true);
    if ("channel" in out) {
      // the daemon it started outlives channels by design: end it with the test
      process.kill((await out.channel.hello).daemonPid, "SIGKILL");
      out.channel.close("test done");
    }
    pod.killAll();
  });
});
