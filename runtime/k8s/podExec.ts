// Commands in a sandbox's pod through the API server's exec endpoint, and the two things built
// on it that several modules need: delivering credentials into a pod, and archive transfers
// that can be killed like any exec.

import type { Readable } from "node:stream";
import type { KubeConfig } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import { UpstreamError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { ExecSession } from "../core/types.ts";
import type { RunInSandbox } from "./archive.ts";
import { SANDBOX_CONTAINER } from "./contract.ts";
import { type CredentialBroker, renderCredentialsFile, WRITE_CREDENTIALS_ARGV } from "./credentials.ts";
import { createExecApi, startExec } from "./exec.ts";
import { EXEC_ID_VAR } from "./execCommand.ts";
import { newExecId, withProcessKill } from "./execKill.ts";

export type RunInPod = (
  podName: string,
  argv: string[],
  stdin?: Uint8Array | Readable,
  timeoutMs?: number,
) => Promise<ExecSession>;

export function podRunner(kc: KubeConfig, namespace: string, clock: Clock): RunInPod {
  // unmasked client frames: masking every stdin byte in JavaScript was most of a resume's CPU (runtime/k8s/exec.ts)
  const execApi = createExecApi(kc);
  return (podName, argv, stdin, timeoutMs) =>
    startExec(execApi, { namespace, pod: podName, container: SANDBOX_CONTAINER }, argv, { stdin, timeoutMs, clock });
}

/** Mints scoped credentials for sandbox `id` and writes them into its pod; resolves with their expiry. */
export function credentialsDelivery(
  broker: CredentialBroker | undefined,
  runInPod: RunInPod,
): ((id: string, podName: string) => Promise<Date>) | undefined {
  if (!broker) return undefined;
  return async (id, podName) => {
    const creds = await broker.mintScoped(id);
    const bytes = Buffer.from(renderCredentialsFile(creds));
    await credentialsWritten(await runInPod(podName, WRITE_CREDENTIALS_ARGV, bytes), id, podName);
    return creds.expiration;
  };
}

/** Settles with the session running WRITE_CREDENTIALS_ARGV: rejects, with its stderr, unless it exited 0. */
export async function credentialsWritten(session: ExecSession, id: string, podName: string): Promise<void> {
  session.stdout.resume();
  let err = "";
  session.stderr.on("data", (c: Buffer) => (err += c.toString()));
  const res = await session.result;
  if (res.exitCode !== 0)
    throw new UpstreamError(
      `writing credentials into sandbox ${id} (pod ${podName}) exited ${res.exitCode}: ${err.trim()}`,
    );
}

/** Archive transfers are killable like any exec: an abandoned tar must not keep running on a real kubelet. */
export function killableRunner(runInPod: RunInPod, podName: string, o: { clock: Clock; logger: Logger }): RunInSandbox {
  return async (argv, stdin) => {
    const execId = newExecId();
    const session = await runInPod(podName, ["env", `${EXEC_ID_VAR}=${execId}`, ...argv], stdin);
    return withProcessKill(session, { execId, run: (a) => runInPod(podName, a), clock: o.clock, logger: o.logger });
  };
}
