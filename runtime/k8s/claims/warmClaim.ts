// A warm claim from the accepting replica's side: the in-memory decision (writeBehind.ts), the
// pod's primed command channel handed to the sandbox (channel/warmChannels.ts), and the record.
// Without credentials the record is held until the pod patch settles and the claim returns at
// once (the first command waits at the gate, gate.ts). With credentials they must be inside
// before the claim returns: they are minted while the patch is in flight, and written once it
// landed (never into a pod whose race was lost, which is another sandbox's), over the pod's
// channel when one is open, else over one websocket exec. A pod this sandbox will not use has its
// channel closed here, and a landed pod it will not use is deleted, never returned to the pool.
import type { SandboxSpec } from "../../core/types.ts";
import type { Acceptor } from "../accept.ts";
import type { SandboxChannels } from "../channel/sandboxChannels.ts";
import type { WarmChannels } from "../channel/warmChannels.ts";
import { ANNOTATIONS } from "../contract.ts";
import {
  type CredentialBroker,
  renderCredentialsFile,
  type ScopedCredentials,
  WRITE_CREDENTIALS_ARGV,
} from "../credentials.ts";
import { credentialsWritten, type RunInPod } from "../podExec.ts";
import type { WriteBehindClaims } from "./writeBehind.ts";

export interface WarmClaimDeps {
  claims: WriteBehindClaims;
  acceptor: Acceptor;
  channels: SandboxChannels;
  /** absent when warm pods get no channel ahead of their claim */
  warmChannels?: WarmChannels;
  /** absent when the credential broker is off */
  broker?: CredentialBroker;
  runInPod: RunInPod;
  /** deletes a claimed pod the sandbox will not use */
  discardPod(id: string, podName: string): void;
  /** the record's annotations: whose budget share admitted it */
  admitted(): Record<string, string>;
}

/** Resolves true when spec took a warm pod (its record is accepted), false for a miss: go cold. */
export function warmClaimer(d: WarmClaimDeps): (spec: SandboxSpec) => Promise<boolean> {
  const writeCredentials = async (id: string, podName: string, creds: ScopedCredentials): Promise<void> => {
    const bytes = Buffer.from(renderCredentialsFile(creds));
    // opening a channel is up to three execs: on the claim's path one websocket exec is quicker
    const session =
      (d.channels.pool.current(id)
        ? await d.channels.exec(id, podName, { command: WRITE_CREDENTIALS_ARGV, stdin: bytes }, {})
        : undefined) ?? (await d.runInPod(podName, WRITE_CREDENTIALS_ARGV, bytes));
    await credentialsWritten(session, id, podName);
  };

  return async (spec) => {
    const taken = d.claims.take(spec);
    if (!taken) return false;
    const { podName } = taken;
    d.warmChannels?.claim(podName, spec.id);
    const dropChannel = () => d.channels.pool.forget(spec.id, podName);
    const unused = () => {
      dropChannel();
      void taken.outcome.then((o) => (o === "landed" ? d.discardPod(spec.id, podName) : undefined));
    };
    if (d.broker) {
      const minted = d.broker.mintScoped(spec.id);
      minted.catch(() => undefined); // awaited below unless the race was lost
      if ((await taken.outcome) === "lost") {
        dropChannel();
        return false;
      }
      try {
        const creds = await minted;
        await writeCredentials(spec.id, podName, creds);
        d.acceptor.accept(spec, podName, {
          ...d.admitted(),
          [ANNOTATIONS.credentialsExpiresAt]: creds.expiration.toISOString(),
        });
      } catch (err) {
        unused();
        throw err;
      }
      return true;
    }
    let held: ReturnType<Acceptor["hold"]>;
    try {
      held = d.acceptor.hold(spec, podName, d.admitted());
    } catch (err) {
      unused();
      throw err;
    }
    if (!held) {
      unused(); // a same-key retry: the sandbox accepted first stands
      return true;
    }
    void taken.outcome.then((o) => {
      if (o === "lost") dropChannel();
      held.release(o === "landed" ? podName : undefined);
    });
    return true;
  };
}
