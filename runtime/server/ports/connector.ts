// Opens a relayed connection to a sandbox port for the HTTP layer: wakes a paused sandbox once
// for any number of concurrent requests, holds each request at most `wakeHoldMs` (then a 503 with
// Retry-After; the wake goes on and the next request joins it), retries the connect for a bounded
// time after a wake (the server started by the post-resume hook needs a moment to listen), and
// keeps the sandbox active while a relayed exchange is open (a lease: see lease()).
import type { Duplex } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import { SbxError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Manager, Sandbox } from "../../core/types.ts";

const ASLEEP: ReadonlySet<Sandbox["phase"]> = new Set(["Pausing", "Paused", "Resuming"]);

/** What stops the hold timer (abort() without a reason builds a DOMException nobody reads). */
const HOLD_DONE = Symbol("wake hold over");

export interface PortConnectorOptions {
  manager: Pick<Manager, "get" | "openPort">;
  clock: Clock;
  logger: Logger;
  /** longest a request waits for a paused sandbox to wake and its server to accept */
  wakeHoldMs: number;
  /** after a wake, how long a refused connect is retried (bounded by the hold too) */
  connectRetryMs: number;
  /** how often an open exchange re-touches its sandbox's activity */
  leaseTouchMs: number;
  /** pause between connect retries (real time: it only spaces attempts, it asserts nothing) */
  retryDelayMs?: number;
}

/** The hold passed before the sandbox woke: the caller answers 503 with Retry-After. */
export class WakeHoldExpired extends SbxError {
  readonly retryAfterSeconds: number;
  constructor(id: string, port: number, holdMs: number, retryAfterSeconds: number) {
    super(
      "timeout",
      `sandbox ${id} is waking up and port ${port} did not answer within the ${holdMs} ms hold (ports.wakeHoldSeconds); retry after ${retryAfterSeconds} s, or raise ports.wakeHoldSeconds`,
      { id, port, retryAfterSeconds },
    );
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** A refusal by the port itself (nothing listens yet), as the local backend reports it. */
export function isPortRefused(err: unknown): boolean {
  return err instanceof SbxError && err.code === "upstream" && err.details.refused === true;
}

/**
 * A relayed connection that cannot tell a refused connect when it opens (Kubernetes port-forward:
 * the refusal comes later, as the stream's error) offers this: it rejects like a refused open when
 * nothing listens on the port. Used after a wake, where "not yet listening" must be retried.
 */
interface ListeningConfirmable {
  confirmListening(): Promise<void>;
}

async function confirmed(sock: Duplex): Promise<Duplex> {
  const { confirmListening } = sock as Duplex & Partial<ListeningConfirmable>;
  if (!confirmListening) return sock;
  // the refusal may arrive on the stream while the check runs: it is the answer then, not an
  // unhandled error
  let failed: Error | undefined;
  const onError = (err: Error) => (failed ??= err);
  sock.on("error", onError);
  try {
    await confirmListening.call(sock);
    if (failed) throw failed;
    return sock;
  } catch (err) {
    // the stream may report the same failure once more, after this: nobody else listens to it
    sock.on("error", () => undefined);
    sock.destroy();
    throw err;
  } finally {
    sock.off("error", onError);
  }
}

export class PortConnector {
  private readonly wakes = new Map<string, Promise<void>>();
  private readonly leases = new Map<string, { owner: string; count: number }>();
  /** how many wakes were started (each is one resume through the pause/resume service) */
  wakesStarted = 0;

  constructor(private readonly o: PortConnectorOptions) {}

  /** A connection to `port` of sandbox `id` on behalf of `owner` (404 for another owner's). */
  async connect(owner: string, id: string, port: number): Promise<Duplex> {
    const s = await this.o.manager.get(owner, id);
    if (!ASLEEP.has(s.phase)) return this.open(owner, id, port);
    const ac = new AbortController();
    const attempt = this.afterWake(owner, id, port, ac.signal);
    const hold = this.o.clock.sleep(this.o.wakeHoldMs, ac.signal).then(
      () => "hold" as const,
      () => "done" as const,
    );
    const first = await Promise.race([
      attempt.then(
        () => "ok" as const,
        () => "ok" as const,
      ),
      hold,
    ]);
    if (first === "hold") {
      ac.abort(HOLD_DONE);
      // a connection that arrives after we gave up is closed, an error only logged
      attempt.then(
        (sock) => sock.destroy(),
        () => undefined,
      );
      throw new WakeHoldExpired(id, port, this.o.wakeHoldMs, 1);
    }
    ac.abort(HOLD_DONE);
    return attempt;
  }

  /**
   * Holds the sandbox active while an exchange (a request with its response, a websocket, an SSE
   * stream) is open: a touch now, one every leaseTouchMs while any is open, and one at the end,
   * so the idle timeout and automatic pause count from when the last stream closed. Returns the
   * release. Touches go through the Manager's throttled activity path like every API call.
   */
  lease(owner: string, id: string): () => void {
    const held = this.leases.get(id);
    if (held) held.count++;
    else {
      this.leases.set(id, { owner, count: 1 });
      void this.heartbeat(owner, id);
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const l = this.leases.get(id);
      if (l && --l.count === 0) this.leases.delete(id);
      this.touch(owner, id);
    };
  }

  /** Open exchanges per sandbox (metrics, tests). */
  openLeases(id: string): number {
    return this.leases.get(id)?.count ?? 0;
  }

  private async heartbeat(owner: string, id: string): Promise<void> {
    this.touch(owner, id);
    while (this.leases.has(id)) {
      await this.o.clock.sleep(this.o.leaseTouchMs);
      if (this.leases.has(id)) this.touch(owner, id);
    }
  }

  private touch(owner: string, id: string): void {
    // get() records activity (the Manager's owned()); a sandbox gone meanwhile is not an error here
    this.o.manager.get(owner, id).catch(() => undefined);
  }

  private open(owner: string, id: string, port: number): Promise<Duplex> {
    const { openPort } = this.o.manager;
    if (!openPort) throw new SbxError("conflict", "this service's manager cannot relay ports");
    return openPort.call(this.o.manager, owner, id, port);
  }

  /** One wake per sandbox at a time, whoever asks; then connect, retrying while the server starts. */
  private async afterWake(owner: string, id: string, port: number, signal: AbortSignal): Promise<Duplex> {
    let wake = this.wakes.get(id);
    if (!wake) {
      this.wakesStarted++;
      // the wake is the Manager's openPort: admission-checked, audited, and it honours
      // sbx.auto-resume; its own connection is not used (the server may not listen yet)
      wake = this.open(owner, id, port).then(
        (sock) => void sock.destroy(),
        (err) => {
          if (!isPortRefused(err)) throw err;
        },
      );
      this.wakes.set(id, wake);
      wake.then(
        () => this.wakes.delete(id),
        () => this.wakes.delete(id),
      );
    }
    await wake;
    const until = performance.now() + this.o.connectRetryMs;
    for (;;) {
      try {
        return await confirmed(await this.open(owner, id, port));
      } catch (err) {
        if (!isPortRefused(err) || signal.aborted || performance.now() > until) throw err;
        await new Promise((r) => setTimeout(r, this.o.retryDelayMs ?? 25));
      }
    }
  }
}
