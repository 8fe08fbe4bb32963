// Warm claims by an in-memory decision, the pod patch written behind. take() picks a ready
// warm pod this replica owns (the partition), marks it taken, shows this replica the pod as
// claimed at once (an optimistic copy in the index, so the sandbox is ready to every reader
// here) and sends the resourceVersion-guarded patch without waiting for it. The patch is the
// arbiter: it lands (the pod is ours) or it is refused (409, 404, 422: someone else won, or the
// pod changed), fails, or outlasts claimTimeoutMs; then the claim is lost and the sandbox moves
// to a cold pod. landed(id) is what the first command waits on, so code never runs in a pod
// whose claim has not landed. What it costs: a claim that loses becomes a cold start after it
// was answered "ready" (with the partition this needs a replica change or a pod modified
// under the claim), and the record is written only after the patch settled.
import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../../core/clock.ts";
import type { Logger } from "../../core/log.ts";
import type { SandboxSpec } from "../../core/types.ts";

/** A pod chosen in memory, and the guarded patch that makes it ours (WarmPool.reserve). */
export interface Reservation {
  /** the pod as the informer had it when chosen */
  pod: V1Pod;
  /** the same pod with the claim's labels and annotations applied, for this replica's index */
  claimed: V1Pod;
  /** sends the resourceVersion-guarded claim patch; resolves with the pod the API server returned */
  write(): Promise<V1Pod>;
}

export type ClaimOutcome = "landed" | "lost";

export interface WriteBehindClaimsOptions {
  /** picks a ready warm pod for spec that owns(podName) allows, or undefined */
  reserve(spec: SandboxSpec, owns: (podName: string) => boolean): Reservation | undefined;
  /** this replica's partition of the pool (ClaimPartition.owns, or every pod with one replica) */
  owns(podName: string): boolean;
  /** the index: what this replica reads pods from */
  pods: { upsertPod(pod: V1Pod): void; pod(name: string): V1Pod | undefined };
  /** a refusal that means the pod went to someone else or changed (409, 404, 422) */
  isLostRace(err: unknown): boolean;
  clock: Clock;
  logger: Logger;
  /** a patch still unanswered after this long counts as lost (default 20 s) */
  claimTimeoutMs?: number;
}

export interface ClaimStats {
  /** claims decided in memory */
  taken: number;
  landed: number;
  /** refused, failed or timed out: moved to a cold pod */
  lost: number;
  /** patches sent and not settled yet */
  pending: number;
}

export interface TakenClaim {
  podName: string;
  /** settles once the patch landed or the claim is lost; never rejects */
  outcome: Promise<ClaimOutcome>;
}

export class WriteBehindClaims {
  private readonly pending = new Map<string, Promise<ClaimOutcome>>();
  private readonly counts = { taken: 0, landed: 0, lost: 0 };
  private readonly timeoutMs: number;

  constructor(private readonly o: WriteBehindClaimsOptions) {
    this.timeoutMs = o.claimTimeoutMs ?? 20_000;
  }

  /** Decides a claim for spec in memory and starts its write; undefined when no owned pod is ready. */
  take(spec: SandboxSpec): TakenClaim | undefined {
    const r = this.o.reserve(spec, (name) => this.o.owns(name));
    if (!r) return undefined;
    const podName = r.pod.metadata!.name!;
    this.counts.taken++;
    this.o.pods.upsertPod(r.claimed);
    const outcome = this.settle(spec.id, podName, r);
    this.pending.set(spec.id, outcome);
    void outcome.then(() => this.pending.delete(spec.id));
    return { podName, outcome };
  }

  /** The claim of sandbox id still being written, if any: the first command waits on it. */
  landed(id: string): Promise<ClaimOutcome> | undefined {
    return this.pending.get(id);
  }

  stats(): ClaimStats {
    return { ...this.counts, pending: this.pending.size };
  }

  private async settle(id: string, podName: string, r: Reservation): Promise<ClaimOutcome> {
    const stop = new AbortController();
    const timedOut = this.o.clock.sleep(this.timeoutMs, stop.signal).then(
      () => "timeout" as const,
      () => "aborted" as const,
    );
    const written = r.write().then(
      (pod) => ({ pod }),
      (err: unknown) => ({ err }),
    );
    const first = await Promise.race([written, timedOut]);
    stop.abort();
    if (typeof first === "object" && "pod" in first) {
      this.o.pods.upsertPod(first.pod);
      this.counts.landed++;
      return "landed";
    }
    this.counts.lost++;
    this.restore(podName, r);
    const why =
      first === "timeout" || first === "aborted"
        ? `no answer within ${this.timeoutMs} ms`
        : this.o.isLostRace(first.err)
          ? "another claim won the pod, or it changed"
          : String((first.err as Error)?.message ?? first.err);
    this.o.logger.warn({ sandbox: id, pod: podName, why }, "warm claim lost; the sandbox moves to a cold pod");
    return "lost";
  }

  /**
   * Takes the optimistic copy back out of the index (unless the informer already replaced it):
   * left there, it would tell this replica's reconciler that the pod carries our sandbox's label,
   * and it would delete the winner's pod as a stray.
   */
  private restore(podName: string, r: Reservation): void {
    if (this.o.pods.pod(podName) === r.claimed) this.o.pods.upsertPod(r.pod);
  }
}
