// The channel's local test fixture: the real helper binary (built once if missing), a private
// directory for its copy and its daemon's sockets, and channels to daemons run on this machine,
// as channel.test.ts, pool.test.ts and open.test.ts use them. A daemon outlives its channels by
// design, so the fixture remembers every daemon it saw and kills them when the test file ends.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Clock } from "../../core/clock.ts";
import { ensureHelperBinary } from "../../local/helperBinary.ts";
import { CommandChannel } from "./channel.ts";
import { localChannelTransport } from "./localTransport.ts";

export interface LocalHelper {
  /** the helper binary's path */
  readonly binary: string;
  /** a fresh temporary directory of this test file's own, removed by close() */
  readonly root: string;
  /** the helper's directory, under root (not made yet: the channel script makes it, as in a pod) */
  readonly dir: string;
  /** a channel to the daemon in dir, as if in pod `pod`; its daemon is killed by close() */
  openChannel(pod: string, clock: Clock): Promise<CommandChannel>;
  /** kills every daemon a channel opened here reported, then removes root; again, it does nothing */
  close(): void;
}

/** `prefix` names the temporary directory (e.g. "sbx-ch-"), so a leftover says which test left it. */
export async function startLocalHelper(prefix: string): Promise<LocalHelper> {
  const binary = await ensureHelperBinary();
  const root = mkdtempSync(join(tmpdir(), prefix));
  const dir = join(root, "h");
  const daemons = new Set<number>();
  return {
    binary,
    root,
    dir,
    openChannel: async (pod, clock) => {
      const channel = new CommandChannel(localChannelTransport(binary, dir), pod, clock);
      daemons.add((await channel.hello).daemonPid);
      return channel;
    },
    close: () => {
      for (const pid of daemons) killIfAlive(pid);
      daemons.clear(); // a second close must not signal a pid the system may have reused
      // SIGKILL lands asynchronously: a dying daemon (or a command it ran) may still be writing
      // its sockets and files while the tree goes, which rmdir answers with ENOTEMPTY (seen
      // once in a CI run): try again, briefly
      rmSync(root, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
    },
  };
}

function killIfAlive(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone: the test killed it, or it exited with its last command
  }
}
