// The ledger's requests to its shares Lease, each bounded in time on the injected clock: a
// request on a dead connection would otherwise wait for the HTTP client's own timeout (minutes)
// and hold every later round, so the replica would fence itself however healthy the API server
// was. An aborted write may still land; the next round reads whatever did. Each request is
// timed, so a slow round can say where its time went.
import type { CoordinationV1Api, V1Lease } from "@kubernetes/client-node";
import type { Clock } from "../../core/clock.ts";
import { UpstreamError } from "../../core/errors.ts";
import { abortOn, isConflict, isNotFound, jsonPatch, statusCode } from "../client.ts";

export interface LeaseRequestsOptions {
  /** its own connection pool (KubeClients.shares), not the one the replica's other requests queue on */
  api: CoordinationV1Api;
  namespace: string;
  name: string;
  clock: Clock;
  /** a request unanswered after this long is aborted and fails the round */
  timeoutMs: number;
  /** monotonic ms, for the timings */
  now: () => number;
}

export class LeaseRequests {
  private timings: string[] = [];

  constructor(private readonly o: LeaseRequestsOptions) {}

  read(): Promise<V1Lease> {
    const { name, namespace } = this.o;
    return this.bounded("get", (signal) => this.o.api.readNamespacedLease({ name, namespace }, abortOn(signal)));
  }

  create(body: V1Lease): Promise<V1Lease> {
    const { namespace } = this.o;
    return this.bounded("create", (signal) => this.o.api.createNamespacedLease({ namespace, body }, abortOn(signal)));
  }

  replace(body: V1Lease): Promise<V1Lease> {
    const { name, namespace } = this.o;
    return this.bounded("put", (signal) =>
      this.o.api.replaceNamespacedLease({ name, namespace, body }, abortOn(signal)),
    );
  }

  /** An RFC 6902 patch (the ledger's own-entry renewal: a test of its entry, then its change); no resourceVersion. */
  patch(ops: object[]): Promise<V1Lease> {
    const { name, namespace } = this.o;
    return this.bounded("patch", (signal) =>
      this.o.api.patchNamespacedLease({ name, namespace, body: ops }, jsonPatch(abortOn(signal))),
    );
  }

  /** The requests since the last call, as "get ok 180ms, put 409 2136ms, ...", and forgets them. */
  take(): string {
    const out = this.timings.join(", ");
    this.timings = [];
    return out;
  }

  private async bounded<T>(verb: string, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const abort = new AbortController();
    const settled = new AbortController();
    const t0 = this.o.now();
    let outcome = "ok";
    const timeout = this.o.clock.sleep(this.o.timeoutMs, settled.signal).then(
      () => {
        abort.abort();
        throw new UpstreamError(
          `budget shares: the ${verb} of Lease ${this.o.namespace}/${this.o.name} took longer than ${this.o.timeoutMs} ms; aborted it, the next round tries again`,
        );
      },
      () => undefined as never, // the request settled first
    );
    try {
      return await Promise.race([call(abort.signal), timeout]);
    } catch (err) {
      outcome = outcomeOf(err, abort.signal.aborted);
      throw err;
    } finally {
      settled.abort();
      this.timings.push(`${verb} ${outcome} ${Math.round(this.o.now() - t0)}ms`);
    }
  }
}

function outcomeOf(err: unknown, aborted: boolean): string {
  if (isConflict(err)) return "409";
  if (isNotFound(err)) return "404";
  if (isTestFailed(err)) return "422";
  return aborted ? "timeout" : "error";
}

/** What the API server answers a JSON patch whose test op failed: here, this replica's entry changed under it. */
export const isTestFailed = (err: unknown) => statusCode(err) === 422;
