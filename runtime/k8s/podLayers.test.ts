// The replica's side of pods moving their own layers, over a fake channel: what it asks the pod's
// helper to run, how it reads the answer (untrusted: parsed strictly), which exits mean "this pod
// cannot, move it yourself" and which fail the layer, progress, and an abort killing the command.
// The helper itself is test/local/blob.test.ts; the whole path on the cluster is
// test/k8s/pause/pod-layers.test.ts.
import { PassThrough, type Readable } from "node:stream";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../core/clock.ts";
import type { ExecResult } from "../core/types.ts";
import type { DirectTransfer } from "../snapshot/layers.ts";
import { type TokenIssuer, tokenIssuer, tokenKeyPair } from "../snapshot/registryToken.ts";
import type { ChannelSession } from "./channel/command.ts";
import { parsePushed, podLayers } from "./podLayers.ts";

const DIGEST = `sha256:${"ab".repeat(32)}`;

interface Call {
  args: string[];
  killed: boolean;
  /** what the helper got on stdin */
  stdin: Promise<string>;
}

/** A helper in the pod that answers `exitCode` with `stdout` and `stderr`, or never (hold). */
function fakePod(
  answer: { exitCode: number; stdout?: string; stderr?: string; hold?: boolean } | undefined,
  tokens?: TokenIssuer,
) {
  const calls: Call[] = [];
  const channels = {
    async runHelper(_id: string, _pod: string, args: string[], stdin?: Readable) {
      if (!answer) return undefined;
      const call: Call = { args, killed: false, stdin: stdin ? text(stdin) : Promise.resolve("") };
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
  const layers = podLayers({
    registry: "http://10.0.0.5:5000",
    channels,
    lookup,
    logger,
    ...(tokens ? { tokens } : {}),
  });
  return { layers, calls, lines };
}

async function text(r: Readable): Promise<string> {
  let s = "";
  for await (const c of r) s += String(c);
  return s;
}

/** the replica's registry client: `mounts` records each mount, `holds` says whether `from` has the blob */
function replicaOci(holds = true) {
  const mounts: [string, string, string][] = [];
  return {
    mounts,
    oci: {
      async mountBlob(repo: string, from: string, digest: string) {
        mounts.push([repo, from, digest]);
        return holds;
      },
    },
  };
}

const noMounts = {
  async mountBlob(): Promise<boolean> {
    throw new Error("a pod without tokens uses the snapshot repository itself: nothing to mount");
  },
};

const t = (
  over: { signal?: AbortSignal; onProgress?: (n: number) => void; oci?: DirectTransfer["oci"] } = {},
): DirectTransfer => ({
  repository: "sbx-snapshots",
  oci: over.oci ?? noMounts,
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

describe("with a token issuer: each sandbox in its own repository", () => {
  const now = new Date("2026-12-02T12:00:00Z");
  const issuer = tokenIssuer({
    ...tokenKeyPair({ now }),
    issuer: "sbx",
    service: "sbx-registry",
    ttlSeconds: 900,
    clock: new ManualClock(now),
  });
  const claims = (line: string) => JSON.parse(Buffer.from(line.split(" ")[1]!.split(".")[1]!, "base64url").toString());
  const pushed = { exitCode: 0, stdout: `{"digest":"${DIGEST}","size":10240,"entries":3}\n` };
  const layer = { path: "/workspace", digest: DIGEST, size: 10240, entries: 3 };

  it("a push goes to the sandbox's repository with its token on stdin, then is mounted into the snapshot repository", async () => {
    const pod = fakePod(pushed, issuer);
    const { oci, mounts } = replicaOci();
    expect(await pod.layers.push("sbx-a", "/workspace", t({ oci }))).toEqual(layer);
    expect(pod.calls[0]!.args.slice(0, 5)).toEqual([
      "blob",
      "push",
      "--auth-stdin",
      "--url",
      "http://10.0.0.5:5000/v2/sbx-snapshots/sbx-a/blobs/uploads/",
    ]);
    const line = await pod.calls[0]!.stdin;
    expect(line).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+\n$/);
    expect(claims(line).access).toEqual([
      { type: "repository", name: "sbx-snapshots/sbx-a", actions: ["pull", "push"] },
    ]);
    expect(pod.calls[0]!.args.join(" ")).not.toContain(line.trim().split(" ")[1]);
    expect(mounts).toEqual([["sbx-snapshots", "sbx-snapshots/sbx-a", DIGEST]]);
  });

  it("a digest the sandbox's repository does not hold fails the layer", async () => {
    const pod = fakePod(pushed, issuer);
    await expect(pod.layers.push("sbx-a", "/workspace", t({ oci: replicaOci(false).oci }))).rejects.toThrow(
      /answered sha256:ab.*which its repository sbx-snapshots\/sbx-a does not hold/,
    );
  });

  it("a restore mounts the layer into the sandbox's repository first, then pulls it from there", async () => {
    const pod = fakePod({ exitCode: 0 }, issuer);
    const { oci, mounts } = replicaOci();
    expect(await pod.layers.restore("sbx-a", layer, t({ oci }))).toBe(true);
    expect(mounts).toEqual([["sbx-snapshots/sbx-a", "sbx-snapshots", DIGEST]]);
    expect(pod.calls[0]!.args.slice(2, 4)).toEqual(["--auth-stdin", "--url"]);
    expect(pod.calls[0]!.args[4]).toBe(`http://10.0.0.5:5000/v2/sbx-snapshots/sbx-a/blobs/${DIGEST}`);
    expect(claims(await pod.calls[0]!.stdin).sub).toBe("sandbox:sbx-a");
  });

  it("a layer the snapshot repository lacks is left to the replica, and the pod runs nothing", async () => {
    const pod = fakePod({ exitCode: 0 }, issuer);
    expect(await pod.layers.restore("sbx-a", layer, t({ oci: replicaOci(false).oci }))).toBe(false);
    expect(pod.calls).toEqual([]);
  });
});
