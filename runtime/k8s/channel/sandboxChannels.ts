// The backend's use of channels: exec, archive transfers (opt-in), and the list/attach API a restarted
// replica uses to find commands again. Each answers undefined when the sandbox's pod takes the
// per-exec websocket path (the helper cannot run there, or channels are off), so the caller
// keeps its old path as the fallback.
import { type Duplex, PassThrough, type Readable } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import { DEFAULT_TERM } from "../../core/execInput.ts";
import type { Logger } from "../../core/log.ts";
import type { ExecRequest } from "../../core/types.ts";
import { ensureHelperBinary } from "../../local/helperBinary.ts";
import type { RunInSandbox } from "../archive.ts";
import { newExecId } from "../execKill.ts";
import type { RunInPod } from "../podExec.ts";
import { WORKSPACE_DIR } from "../podTemplate.ts";
import type { AttachOptions } from "./channel.ts";
import type { ChannelSession } from "./command.ts";
import { embeddedHelper } from "./embedded.ts";
import type { ListedCommand } from "./frames.ts";
import { type HelperBinary, loadHelperBinary, openPodChannel } from "./open.ts";
import { HELPER_DIR } from "./paths.ts";
import { ChannelPool, type CommandChannelMode } from "./pool.ts";
import { connectTunnel } from "./tunnel.ts";
import { UploadSlots } from "./uploadSlots.ts";

export interface CommandChannelOptions {
  /** default true; false: every command is its own websocket exec (the old path, for baselines) */
  enabled?: boolean;
  /** the private directory in the pod; default /tmp/.sbx-helper */
  dir?: string;
  /** close a channel after this long without a command in flight; default 60 s */
  idleMs?: number;
  /** the static helper to copy into pods; default the one built from tools/local-helper */
  helperPath?: string;
  /**
   * Archive transfers (sbx cp, pause and resume data) over the channel too; default false: on the
   * test cluster downloads match the websocket path under load but not on a quiet machine, and
   * uploads (every resume) reach ~80% of it (docs/benchmarks.md "Channel throughput")
   */
  transfers?: boolean;
  /** helper copies into pods in flight at once (uploadSlots.ts); default 8 */
  maxUploads?: number;
  /**
   * channel opens in flight at once; default 32. Each is up to three short-lived TLS websockets
   * whose freed memory the allocator keeps: 200 opens at once left 236 KiB of RSS per channel,
   * 32 at a time 109 KiB, in about the same time (docs/benchmarks.md)
   */
  maxOpens?: number;
  /**
   * warm pods of this replica's part of the pool that get a channel before their claim
   * (warmChannels.ts), at most; default 64, 0 for none (the baseline: a claim's first command
   * or credentials open the channel)
   */
  primeWarm?: number;
}

export interface SandboxChannels {
  mode(id: string): CommandChannelMode | undefined;
  exec(id: string, pod: string, req: ExecRequest, baseEnv: Record<string, string>): Promise<ChannelSession | undefined>;
  runner(id: string, pod: string): RunInSandbox;
  /**
   * Runs the pod's own copy of this replica's helper (`args` after its path) over the channel:
   * what the helper does in the pod itself (blob push and pull, podLayers.ts). Undefined when
   * the pod has no channel.
   */
  runHelper(id: string, pod: string, args: string[], stdin?: Readable): Promise<ChannelSession | undefined>;
  list(id: string, pod: string): Promise<ListedCommand[] | undefined>;
  /** `stdin`: written to the command's stdin, which ends when it ends (see CommandChannel.attach) */
  attach(
    id: string,
    pod: string,
    commandId: string,
    stdin?: Readable,
    o?: Omit<AttachOptions, "stdin">,
  ): Promise<ChannelSession | undefined>;
  /** a TCP connection to `port` in the pod over its channel (tunnel.ts); open while the connection is */
  tunnel(id: string, pod: string, port: number): Promise<Duplex | undefined>;
  readonly pool: ChannelPool;
  close(): void;
}

// Over 60 lines on purpose: exec, transfers, list/attach and the helper run share one pool and one helper load
// (closure).
export function createSandboxChannels(o: {
  runInPod: RunInPod;
  clock: Clock;
  logger: Logger;
  /** the websocket path's archive runner, for pods without a channel */
  fallbackRunner: (id: string, pod: string) => RunInSandbox;
  options?: CommandChannelOptions;
}): SandboxChannels {
  const opts = o.options ?? {};
  let helper: Promise<HelperBinary> | undefined;
  const loadHelper = () => {
    // an explicit path, else the one a runtime bundle carries, else built from this checkout
    helper ??= (async () =>
      opts.helperPath
        ? loadHelperBinary(opts.helperPath)
        : (embeddedHelper() ?? loadHelperBinary(await ensureHelperBinary())))();
    helper.catch(() => (helper = undefined)); // a failed build is tried again next time
    return helper;
  };
  const uploads = new UploadSlots(opts.maxUploads ?? 8);
  const opens = new UploadSlots(opts.maxOpens ?? 32);
  const pool = new ChannelPool({
    open: (pod) =>
      opts.enabled === false
        ? Promise.resolve({ fallback: "command channels are turned off for this backend" })
        : opens.run(() =>
            openPodChannel({ runInPod: o.runInPod, helper: loadHelper, clock: o.clock, dir: opts.dir, uploads }, pod),
          ),
    clock: o.clock,
    logger: o.logger,
    idleMs: opts.idleMs,
  });
  const settled = (s: ChannelSession) => s.result;
  return {
    pool,
    mode: (id) => pool.mode(id),

    async exec(id, pod, req, baseEnv) {
      const execId = newExecId();
      return pool.with(
        id,
        pod,
        (c) =>
          c.start({
            id: execId,
            argv: req.command,
            env: { ...(req.pty ? { TERM: DEFAULT_TERM } : {}), ...baseEnv, ...(req.env ?? {}) },
            cwd: req.cwd ?? WORKSPACE_DIR,
            timeoutMs: req.timeoutMs,
            stdin: req.stdin,
            label: req.label,
            pty: req.pty,
          }),
        settled,
      );
    },

    runner(id, pod) {
      if (!opts.transfers) return o.fallbackRunner(id, pod);
      return async (argv: string[], stdin?: Readable) => {
        const start = (c: Parameters<Parameters<ChannelPool["with"]>[2]>[0]) =>
          c.start({ id: newExecId(), argv, env: {}, cwd: "/", stdin });
        return (await pool.with(id, pod, start, settled)) ?? o.fallbackRunner(id, pod)(argv, stdin);
      };
    },

    async runHelper(id, pod, args, stdin) {
      if (opts.enabled === false) return undefined;
      const { sha256 } = await loadHelper();
      // an open channel means this helper version is in the pod (the open copies it in)
      const path = `${opts.dir ?? HELPER_DIR}/helper-${sha256}`;
      return pool.with(
        id,
        pod,
        (c) => c.start({ id: newExecId(), argv: [path, ...args], env: {}, cwd: "/", stdin }),
        settled,
      );
    },

    async list(id, pod) {
      return pool.with(
        id,
        pod,
        (c) => c.list(),
        (p) => p,
      );
    },

    async attach(id, pod, commandId, stdin, o) {
      return pool.with(id, pod, (c) => c.attach(commandId, { ...o, stdin }), settled);
    },

    async tunnel(id, pod, port) {
      const input = new PassThrough();
      const session = await pool.with(id, pod, (c) => c.tunnel(newExecId(), port, input), settled);
      return session && connectTunnel(session, input, { sandboxId: id, port }, o.clock);
    },

    close: () => pool.close(),
  };
}
