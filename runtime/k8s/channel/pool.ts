// The channels of one replica, one per sandbox pod: opened on first use (every caller of that
// moment awaits the same open), closed after idleMs without a command in flight (on the
// injected clock), opened again on demand. A channel that breaks is dropped at once, so the
// next call opens a new one; the calls it carried have already failed, retryably. A pod where
// the helper cannot run is remembered as "exec": its commands take the per-exec websocket path.
import type { Clock } from "../../core/clock.ts";
import type { Logger } from "../../core/log.ts";
import type { CommandChannel } from "./channel.ts";
import type { OpenOutcome } from "./open.ts";

export type CommandChannelMode = "helper" | "exec";

/** Why an idle timer stops: a plain value, as abort() without one builds a DOMException per command. */
const IN_USE = Symbol("channel in use again");

export interface ChannelPoolOptions {
  open(pod: string): Promise<OpenOutcome>;
  clock: Clock;
  logger: Logger;
  /** default 60 s */
  idleMs?: number;
}

interface Entry {
  pod: string;
  mode?: CommandChannelMode;
  opening?: Promise<CommandChannel | undefined>;
  channel?: CommandChannel;
  inFlight: number;
  idle?: AbortController;
  /** forgotten: an open that finishes now closes what it opened */
  dropped?: boolean;
}

export class ChannelPool {
  private readonly entries = new Map<string, Entry>();
  private closed = false;

  constructor(private readonly o: ChannelPoolOptions) {}

  /** how this replica runs commands in the sandbox, once it has tried */
  mode(id: string): CommandChannelMode | undefined {
    return this.entries.get(id)?.mode;
  }

  /** the open channel, for tests: undefined while none is open */
  current(id: string): CommandChannel | undefined {
    const c = this.entries.get(id)?.channel;
    return c && !c.closed ? c : undefined;
  }

  /**
   * Runs `use` on the sandbox's channel and counts it in flight until `settled` resolves; the
   * answer is undefined when the pod takes the websocket path instead.
   */
  async with<T>(
    id: string,
    pod: string,
    use: (c: CommandChannel) => T,
    settled: (t: T) => Promise<unknown>,
  ): Promise<T | undefined> {
    const entry = this.entry(id, pod);
    const channel = await this.channelOf(id, entry);
    if (!channel) return undefined;
    entry.inFlight++;
    entry.idle?.abort(IN_USE);
    entry.idle = undefined;
    const done = () => {
      entry.inFlight--;
      this.armIdle(entry, channel);
    };
    let t: T;
    try {
      t = use(channel);
    } catch (err) {
      done();
      throw err;
    }
    settled(t).then(done, done);
    return t;
  }

  /**
   * Opens a channel to `pod` under `key` ahead of any command (a warm pod's, warmChannels.ts);
   * unused, it has no idle timer, so it stays open until forgotten, moved or broken. Opening
   * again one that broke is the same call. Resolves once the open settled, never rejects.
   */
  async prime(key: string, pod: string): Promise<void> {
    if (this.closed) return;
    await this.channelOf(key, this.entry(key, pod)).catch(() => undefined);
  }

  /**
   * Moves the channel of `from` (its pod `pod`) to `to`, open or still opening, so the commands
   * of `to` use it; false when `from` has no entry for that pod or `to` already has one.
   */
  move(from: string, to: string, pod: string): boolean {
    const e = this.entries.get(from);
    if (!e || e.pod !== pod || this.entries.has(to)) return false;
    this.entries.delete(from);
    this.entries.set(to, e);
    return true;
  }

  /** the keys with an entry, open or not: what prime() and move() left here */
  keys(): string[] {
    return [...this.entries.keys()];
  }

  /** closes the sandbox's channel; with `pod`, only a channel to that pod */
  forget(id: string, pod?: string): void {
    const e = this.entries.get(id);
    if (!e || (pod !== undefined && e.pod !== pod)) return;
    this.entries.delete(id);
    e.dropped = true;
    e.idle?.abort();
    e.channel?.close("the sandbox is gone");
  }

  close(): void {
    this.closed = true;
    for (const id of [...this.entries.keys()]) this.forget(id);
  }

  private entry(id: string, pod: string): Entry {
    const e = this.entries.get(id);
    if (e && e.pod === pod) return e;
    if (e) this.forget(id); // a new pod (resumed, replaced): the old channel is of no use
    const fresh: Entry = { pod, inFlight: 0 };
    this.entries.set(id, fresh);
    return fresh;
  }

  private async channelOf(id: string, e: Entry): Promise<CommandChannel | undefined> {
    if (e.mode === "exec" || this.closed) return undefined;
    if (e.channel && !e.channel.closed) return e.channel;
    e.opening ??= this.open(id, e).finally(() => (e.opening = undefined));
    return e.opening;
  }

  private async open(id: string, e: Entry): Promise<CommandChannel | undefined> {
    const log = this.o.logger.child({ sandbox: id, pod: e.pod, op: "command-channel" });
    const outcome = await this.o.open(e.pod);
    if ("fallback" in outcome) {
      e.mode = "exec";
      log.warn({ reason: outcome.fallback }, "the helper cannot run in this pod; commands go over one exec each");
      return undefined;
    }
    const { channel } = outcome;
    if (this.closed || e.dropped) {
      channel.close("the pool moved on while it opened");
      return undefined;
    }
    e.mode = "helper";
    e.channel = channel;
    channel.onClose((err) => {
      if (e.channel === channel) e.channel = undefined;
      log.debug({ why: err.message }, "command channel closed");
    });
    log.debug("command channel open");
    return channel;
  }

  private armIdle(e: Entry, channel: CommandChannel): void {
    if (e.inFlight > 0 || channel.closed || e.idle) return;
    const idle = new AbortController();
    e.idle = idle;
    this.o.clock.sleep(this.o.idleMs ?? 60_000, idle.signal).then(
      () => {
        if (e.idle === idle) e.idle = undefined;
        if (e.inFlight === 0) channel.close("it was idle");
      },
      () => undefined,
    );
  }
}
