// What runs inside a sandbox's pod through the API server: commands (exec), files (tar in and
// out) and the sandbox's own output (logs). Commands and transfers go over the pod's command
// channel when the helper runs there (runtime/k8s/channel/); what follows is the fallback, one
// websocket exec each. Every command and transfer is killable: closing the stream leaves a
// command running on a real kubelet, so kill() also runs a second exec that kills every
// process marked with the command's id (execKill.ts).
import { PassThrough, type Readable } from "node:stream";
import { Log } from "@kubernetes/client-node";
import { ConflictError, ValidationError } from "../core/errors.ts";
import type { Backend, TerminalSize } from "../core/types.ts";
import { getArchive, putArchive } from "./archive.ts";
import type { ChannelSession } from "./channel/command.ts";
import { withOomVerdict } from "./channel/oom.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import { toDomainError } from "./client.ts";
import { SANDBOX_CONTAINER } from "./contract.ts";
import { credentialsEnv } from "./credentials.ts";
import { buildExecArgv, validateWrapperExec } from "./execCommand.ts";
import { newExecId, withProcessKill } from "./execKill.ts";
import type { SandboxLookup } from "./lookup.ts";
import type { KubernetesParts } from "./parts.ts";
import { podNameOf } from "./resource.ts";

export type SandboxCommands = Pick<Backend, "exec" | "putArchive" | "getArchive" | "logs">;

/** `channels`: the command channel per pod (runtime/k8s/channel/); its fallback is the websocket path here */
export function sandboxCommands(p: KubernetesParts, lookup: SandboxLookup, channels: SandboxChannels): SandboxCommands {
  const { config, clock, runInPod, namespace } = p;
  const podLogger = (id: string, pod: string) => p.logger.child({ sandbox: id, pod });
  const transfers = (id: string, podName: string) => channels.runner(id, podName);
  const containerEnd = async (pod: string) => {
    const seen = await p.clients.core.readNamespacedPod({ name: pod, namespace });
    return seen.status?.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER)?.state?.terminated;
  };
  return {
    async exec(id, req) {
      const { cr, podName } = await lookup.runningPod(id);
      const baseEnv = { ...(cr.spec.env ?? {}), ...(config.credentials ? credentialsEnv(config.credentials, id) : {}) };
      validateWrapperExec(req, baseEnv);
      const viaChannel = await channels.exec(id, podName, req, baseEnv);
      if (viaChannel && req.pty) await terminalStarted(viaChannel);
      // a channel that broke because the container was OOM-killed: 137 + oomKilled, as over a websocket
      if (viaChannel) return withOomVerdict(viaChannel, { readEnd: () => containerEnd(podName), clock });
      if (req.pty) throw noTerminalOverExec(id, req.pty);
      const execId = newExecId();
      const session = await runInPod(podName, buildExecArgv(req, baseEnv, execId), req.stdin, req.timeoutMs);
      return withProcessKill(session, {
        execId,
        timeoutMs: req.timeoutMs,
        run: (argv) => runInPod(podName, argv),
        clock,
        logger: podLogger(id, podName),
      });
    },

    async putArchive(id, dir, tar) {
      const { podName } = await lookup.runningPod(id);
      await putArchive(transfers(id, podName), id, dir, tar);
    },

    async getArchive(id, path) {
      const { podName } = await lookup.runningPod(id);
      return getArchive(transfers(id, podName), id, path);
    },

    async logs(id, opts): Promise<Readable> {
      const cr = await lookup.resource(id);
      const out = new PassThrough();
      try {
        await new Log(p.clients.kc).log(namespace, podNameOf(cr), SANDBOX_CONTAINER, out, {
          follow: !!opts.follow,
          ...(opts.tailLines !== undefined ? { tailLines: opts.tailLines } : {}),
        });
      } catch (err) {
        throw toDomainError(err, "read logs", { kind: "sandbox", name: id });
      }
      return out;
    },
  };
}

// A pty the pod's daemon refuses (one from before terminals: ConflictError) fails the exec, not
// only its result; the daemon's 'R' or 'F' comes at once.
async function terminalStarted(session: ChannelSession): Promise<void> {
  await session.pid.catch((err: unknown) => {
    if (err instanceof ConflictError) throw err;
  });
}

/** one websocket exec per command has no terminal to give (the pod's daemon opens ptys) */
function noTerminalOverExec(id: string, pty: TerminalSize): ValidationError {
  return new ValidationError(
    "pty",
    pty,
    `sandbox ${id} runs commands over one exec per command (its pod cannot run the sbx helper, or command channels are off), which has no terminals; run it without a pty, or use a profile whose pods run the helper`,
  );
}
