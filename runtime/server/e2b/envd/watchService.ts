// filesystem.Filesystem's directory watches, both forms, on the machinery of watchRunner.ts:
// WatchDir (the stream the JS SDK's files.watchDir reads: a start event once the watch is in
// place, one message per filesystem event, keepalives while nothing happens) and the polled form,
// CreateWatcher / GetWatcherEvents / RemoveWatcher (what clients without streams use: E2B's
// Python SDK's synchronous watch_dir).
//
// Bounded per tenant: at most `maxPerOwner` watchers of both forms at once per owner on this
// replica (more is resource_exhausted, saying how to free one). A client that stops reading is
// cut: for a stream, once an event has waited `stallMs` for the client to take it (the response's
// buffers are full) or more than `maxQueued` wait; for a polled watcher, after `unpolledMs`
// without a GetWatcherEvents or with more than `maxQueued` events waiting. Cut means the command
// is killed and the watcher's place freed; a stream that is read again ends with
// resource_exhausted, a polled watcher is gone (not_found). A listing larger than
// `maxListingBytes` ends the watch. A stream also ends at the SDK's timeoutMs
// (Connect-Timeout-Ms, 60 s by default); both end with the sandbox.
import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { EnvdCaller } from "../access.ts";
import type { EnvdServices } from "./context.ts";
import type { WatchDirResponseSchema } from "./gen/filesystem/filesystem_pb.ts";
import type { WatchEvent } from "./watch.ts";
import { RunningWatch } from "./watchRunner.ts";

type WatchMessage = MessageInitShape<typeof WatchDirResponseSchema>;

export async function* watchDir(
  s: EnvdServices,
  caller: EnvdCaller,
  path: string,
  recursive: boolean,
  ctx: HandlerContext,
): AsyncGenerator<WatchMessage> {
  // include_entry is never sent: the SDK gates it on envd 0.6.3, above the version we report
  const watch = await RunningWatch.start(s, caller, {
    path,
    recursive,
    timeoutMs: ctx.timeoutMs(),
    signal: ctx.signal,
    keepaliveMs: s.keepaliveMs,
    stallMs: s.watch.stallMs,
  });
  if (!watch) return; // the client went away before the watch was in place
  const { state } = watch;
  try {
    yield { event: { case: "start", value: {} } };
    for (;;) {
      // what was seen before the sandbox stopped is still delivered; a cut watch delivers nothing more
      const next = state.end === undefined || state.end === "exited" ? state.queue.shift() : undefined;
      if (next) {
        // the watchdog may stop the watch while this yield waits on a client that does not read
        state.stalledSince = Date.now();
        yield { event: { case: "filesystem", value: { name: next.name, type: next.type } } };
        state.stalledSince = undefined;
        continue;
      }
      if (ctx.signal.aborted) return; // the client went away or its deadline passed
      if (state.end === "exited")
        throw new ConnectError(`the watch of ${JSON.stringify(path)} ended: the sandbox stopped`, Code.Unavailable);
      if (state.end) throw state.end;
      await state.wait(ctx.signal, s.keepaliveMs);
      if (state.queue.length === 0 && !state.end && !ctx.signal.aborted)
        yield { event: { case: "keepalive", value: {} } };
    }
  } finally {
    watch.stop();
  }
}

/** The polled watchers of this replica, by id; each is its sandbox's and its owner's alone. */
export class PolledWatchers {
  private readonly byId = new Map<string, { sandboxId: string; watch: RunningWatch }>();

  async create(s: EnvdServices, caller: EnvdCaller, path: string, recursive: boolean, ctx: HandlerContext) {
    const id = randomUUID();
    const watch = await RunningWatch.start(s, caller, {
      path,
      recursive,
      signal: ctx.signal,
      keepaliveMs: s.keepaliveMs,
      stallMs: s.watch.unpolledMs,
      // cut, timed out, or its sandbox gone: the id stops existing with it
      onStop: () => this.byId.delete(id),
    });
    if (!watch) throw new ConnectError("the client went away before the watch was in place", Code.Canceled);
    watch.state.stalledSince = Date.now(); // a polled watcher is always waiting for its next poll
    this.byId.set(id, { sandboxId: caller.sandboxId, watch });
    return id;
  }

  /** What happened since the last call; the watch stays until removed or cut. */
  take(caller: EnvdCaller, id: string): WatchEvent[] {
    const { state } = this.find(caller, id);
    state.stalledSince = Date.now();
    return state.queue.splice(0);
  }

  remove(caller: EnvdCaller, id: string): void {
    this.find(caller, id).stop();
  }

  private find(caller: EnvdCaller, id: string): RunningWatch {
    const w = this.byId.get(id);
    // another sandbox's watcher id is as unknown as a made-up one
    if (!w || w.sandboxId !== caller.sandboxId)
      throw new ConnectError(
        `watcher ${JSON.stringify(id)} not found: it was removed, or cut (not polled for a while, or its sandbox stopped); create another`,
        Code.NotFound,
      );
    return w.watch;
  }
}
