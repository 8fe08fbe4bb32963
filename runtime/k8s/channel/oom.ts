// A channel breaks under every command it carries when the container dies, and an OOM kill of
// the container (memory.oom.group on cgroup v2: the whole container goes) is the common way to
// die. For those commands the caller must see what the websocket path shows: exit 137 with
// oomKilled. The channel cannot tell an OOM from any other break (its exec ends either way), the
// container status can: this asks for it when a channel broke, for a bounded while, because a
// kubelet reports the termination a moment after the processes are gone.
import type { Clock } from "../../core/clock.ts";
import type { ExecResult } from "../../core/types.ts";
import type { ChannelSession } from "./command.ts";
import { ChannelBrokenError } from "./errors.ts";

/** the sandbox container's terminated state; undefined while it still runs (or is unknown) */
export type ReadContainerEnd = () => Promise<{ reason?: string; exitCode?: number } | undefined>;

export interface OomVerdictOptions {
  readEnd: ReadContainerEnd;
  clock: Clock;
  /**
   * how long a break waits for the container status to say it terminated; default 2 s: a kubelet's
   * relist runs every second. A genuine break (the container still running) costs this much delay
   * before its retryable error, once per call in flight
   */
  graceMs?: number;
  /** between two reads of the status; default 250 ms */
  stepMs?: number;
}

/** the session, whose result is 137 + oomKilled when its channel broke because the container was OOM-killed */
export function withOomVerdict(session: ChannelSession, o: OomVerdictOptions): ChannelSession {
  const started = o.clock.now().getTime();
  const result = session.result.catch(async (err: unknown) => {
    if (!(err instanceof ChannelBrokenError)) throw err;
    if (!(await diedOfOom(o))) throw err;
    const durationMs = o.clock.now().getTime() - started;
    return { exitCode: 137, timedOut: false, oomKilled: true, durationMs } satisfies ExecResult;
  });
  result.catch(() => undefined); // as the session's own: the caller observes it
  return { ...session, result };
}

async function diedOfOom(o: OomVerdictOptions): Promise<boolean> {
  const grace = o.graceMs ?? 2_000;
  const step = o.stepMs ?? 250;
  for (let waited = 0; ; waited += step) {
    // a pod that is gone or unreadable gives no verdict: the break stands as it is
    const end = await o.readEnd().catch(() => "unknown" as const);
    if (end === "unknown") return false;
    if (end) return end.reason === "OOMKilled";
    if (waited >= grace) return false;
    await o.clock.sleep(step);
  }
}
