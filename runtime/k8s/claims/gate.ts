// Holds a sandbox's first command (exec, file transfer, port, logs) until its write-behind warm
// claim settled: code must never run in a pod whose claim did not land, since a lost race means
// the pod is another sandbox's. One wait, on the first command only: once settled, the claim is
// no longer pending and commands go straight through. A lost claim has moved the sandbox to a
// cold pod (runtime/k8s/claims/writeBehind.ts); the held command then waits for that pod to be
// ready instead of answering "not ready" to a client that was told "ready".
import type { SandboxLookup } from "../lookup.ts";
import type { ClaimOutcome } from "./writeBehind.ts";

export interface ClaimGateOptions {
  claims: { landed(id: string): Promise<ClaimOutcome> | undefined };
  /** resolves once the sandbox is ready again (its cold pod), rejects when it failed or timed out */
  awaitReady(id: string, timeoutMs: number): Promise<unknown>;
  /** how long a command held by a lost claim waits for the cold pod (default 120 s) */
  movedWaitMs?: number;
}

export function gateOnClaims(lookup: SandboxLookup, o: ClaimGateOptions): SandboxLookup {
  const movedWaitMs = o.movedWaitMs ?? 120_000;
  const held = async (id: string): Promise<void> => {
    const pending = o.claims.landed(id);
    if (pending && (await pending) === "lost") await o.awaitReady(id, movedWaitMs);
  };
  return {
    async resource(id, graceMs) {
      await held(id);
      return lookup.resource(id, graceMs);
    },
    async runningPod(id) {
      await held(id);
      return lookup.runningPod(id);
    },
  };
}
