// The replica's side of pods moving their own layers, over a fake channel: what it asks the pod's
// helper to run, how it reads the answer (untrusted: parsed strictly), which exits mean "this pod
// cannot, move it yourself" and which fail the layer, progress, and an abort killing the command.
// The helper itself is test/local/blob.test.ts; the whole path on the cluster is
// test/k8s/pause/pod-layers.test.ts.
import { PassThrough, type Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { pino } from "pino";
import type { ExecResult } from "../core/types.ts";
import type { ChannelSession } from "./channel/command.ts";
import { parsePushed, podLayers } from "./podLayers.ts";

const DIGEST = `sha256:${"ab".repeat(32)}`;

interface Call {
  args: string[];
  killed: boolean;
}

/** A helper in the pod that answers `exitCode` with `stdout` and `stderr`, or never (hold). */
function fakePod(answer: { exitCode: number; stdout?: string; stderr?: string; hold?: boolean } | undefined) {
  const calls: Call[] = [];
  const channels = {
    async runHelper(_id: string, _pod: string, args: string[], _stdin?: Readable) {
      if (!answer) return undefined;
      const call: Call = { args, killed: false };
      calls.push(call);
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      let finish!: (r: ExecResult) => void;
      const result = new Promise<ExecResult>((r) => (finish = r));
      const end = (exitCode: number) => {
        stdout.end(answer.stdout ?? "");
        stderr.end(answer.stderr ?? "");
        finish({ exitCode, timedOut: false, oomKilled: false, durationMs: 1 });
      };
      if (!answer.hold) setImmediate(() => end(answer.exitCode));
      return {
        stdout,
        stderr,
        result,
        kill: () => {
          call.killed = true;
          end(137);
        },
        commandId: "c1",
        pid: Promise.resolve(7),
      } as ChannelSession;
    },
  };
  const lookup = { runningPod: async () => ({ podName: "pod-1" }) as never };
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  const layers = podLayers({ registry: "http://10.0.0.5:5000", channels, lookup, logger });
  return { layers, calls, lines };
}

const t = (over: { signal?: AbortSignal; onProgress?: (n: number) => void } = {}) => ({
  repository: "sbx-snapshots",
  signal: over.signal ?? new AbortController().signal,
  onProgress: over.onProgress,
});

describe("push", () => {
  it("runs the helper's blob push of the path's tar, leaving the channel's own directory out of /tmp", async () => {
    const progress: number[] = [];
    const pod = fakePod({
      exitCode: 0,
      stdout: `{"digest":"${DIGEST}","size":10240,"entries":3}\n`,
      stderr: "sbx-progress 4194304\nsbx-progress 8388608\n",
    });
    const layer = await pod.layers.push("sb", "/tmp", t({ onProgress: (n) => progress.push(n) }));
    expect(layer).toEqual({ path: "/tmp", digest: DIGEST, size: 10240, entries: 3 });
    expect(progress).toEqual([4194304, 8388608]);
    expect(pod.calls[0]!.args).toEqual([
      "blob",
      "push",
      "--url",
      "http://10.0.0.5:5000/v2/sbx-snapshots/blobs/uploads/",
      "--tar-root",
      "tmp",
      "--",
      "tar",
      "-c",
      "-f",
      "-",
      "-C",
      "/",
      "--anchored",
      "--exclude=tmp/.sbx-helper",
      "--",
      "tmp",
    ]);
  });

  it("a pod that cannot (no channel, unreachable registry, an old helper) is a fallback, logged with the reason", async () => {
    expect(await fakePod(undefined).layers.push("sb", "/workspace", t())).toBeUndefined();
    for (const exitCode of [3, 64]) {
      const pod = fakePod({ exitCode, stderr: "sbx-helper blob push: connect 10.0.0.5:5000: Connection refused\n" });
      expect(await pod.layers.push("sb", "/workspace", t())).toBeUndefined();
      expect(pod.lines).toContainEqual(
        expect.objectContaining({
          sandbox: "sb",
          op: "push",
          exitCode,
          stderr: expect.stringContaining("Connection refused"),
          msg: expect.stringContaining("the replica moves it"),
        }),
      );
    }
  });

  it("tar failing in the pod fails the layer with its message", async () => {
    const pod = fakePod({ exitCode: 2, stderr: "sbx-helper blob push: tar exited 2\n" });
    await expect(pod.layers.push("sb", "/workspace", t())).rejects.toThrow(
      /exited 2: sbx-helper blob push: tar exited 2/,
    );
  });

  it("an abort kills the command in the pod and rejects with the abort's reason", async () => {
    const pod = fakePod({ exitCode: 0, hold: true });
    const ctl = new AbortController();
    const pushing = pod.layers.push("sb", "/workspace", t({ signal: ctl.signal }));
    await new Promise((r) => setImmediate(r));
    ctl.abort(new Error("sandbox sb is being deleted"));
    await expect(pushing).rejects.toThrow("being deleted");
    expect(pod.calls[0]!.killed).toBe(true);
  });
});

describe("the pod's answer is untrusted", () => {
  it.each([
    ["not JSON", "no JSON"],
    [`{"digest":"sha256:xyz","size":1,"entries":1}`, "no sha256 digest"],
    [`{"digest":"${DIGEST}","size":-1,"entries":1}`, "no size"],
    [`{"digest":"${DIGEST}","size":1.5,"entries":1}`, "no size"],
    [`{"digest":"${DIGEST}","size":1,"entries":-1}`, "no entry count"],
    ["null", "no sha256 digest"],
  ])("%s is refused (%s)", (stdout, why) => {
    expect(() => parsePushed("sb", "/workspace", stdout)).toThrow(why);
  });
});

describe("restore", () => {
  const layer = { path: "/workspace", digest: DIGEST, size: 10240, entries: 3 };

  it("runs the helper's blob pull into tar at the layer's parent, and answers true", async () => {
    const pod = fakePod({ exitCode: 0 });
    expect(await pod.layers.restore("sb", layer, t())).toBe(true);
    expect(pod.calls[0]!.args.slice(0, 8)).toEqual([
      "blob",
      "pull",
      "--url",
      `http://10.0.0.5:5000/v2/sbx-snapshots/blobs/${DIGEST}`,
      "--digest",
      DIGEST,
      "--size",
      "10240",
    ]);
    expect(pod.calls[0]!.args.at(-1)).toBe("/");
  });

  it("a digest mismatch fails the resume; an unreachable registry is a fallback", async () => {
    const bad = fakePod({ exitCode: 4, stderr: "sbx-helper blob pull: digest mismatch: got sha256:00, expected x\n" });
    await expect(bad.layers.restore("sb", layer, t())).rejects.toThrow(/digest mismatch.*corrupt or was replaced/);
    expect(await fakePod({ exitCode: 3 }).layers.restore("sb", layer, t())).toBe(false);
    expect(await fakePod(undefined).layers.restore("sb", layer, t())).toBe(false);
  });
});
