// A sandbox as this replica reports it: the index's view plus what only this replica knows yet,
// the activity it saw but has not flushed (activity.ts) and how it runs commands in the sandbox
// (the command channel's mode). Shared by the backend and the compute release (pause.ts).
import { UpstreamError } from "../core/errors.ts";
import type { Sandbox } from "../core/types.ts";
import type { ActivityRecorder } from "./activity.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

export class SandboxReads {
  constructor(
    private readonly o: {
      index: Pick<SandboxIndex, "sandbox">;
      activity: Pick<ActivityRecorder, "latest">;
      channels: Pick<SandboxChannels, "mode">;
    },
  ) {}

  /** `sb` with this replica's unflushed activity and command-channel mode */
  seen(sb: Sandbox): Sandbox {
    const pending = this.o.activity.latest(sb.id);
    const mode = this.o.channels.mode(sb.id);
    const seen = mode ? { ...sb, commandChannel: mode } : sb;
    return pending && (!sb.lastActivityAt || sb.lastActivityAt < pending.toISOString())
      ? { ...seen, lastActivityAt: pending.toISOString() }
      : seen;
  }

  /** the sandbox just written here; it is in the index (a bug otherwise) */
  derived(id: string): Sandbox {
    const sb = this.o.index.sandbox(id);
    if (!sb) throw new UpstreamError(`sandbox ${id} was written but is missing from the local index; this is a bug`);
    return this.seen(sb);
  }
}
