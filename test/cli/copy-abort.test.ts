// copyIn when the upload fails before it read the archive: the local tar is then blocked on a
// full pipe that nobody reads. Killing it must still settle the copy; before the fix the tar's
// "close" waited for an EOF on that paused pipe, the event loop emptied and the CLI exited 13
// with no message (seen once in 60 runs of test/cli/cp.test.ts's connection-drop case).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { copyIn } from "../../runtime/cli/copy.ts";
import { UpstreamError } from "../../runtime/core/errors.ts";
import type { Manager } from "../../runtime/core/types.ts";

const work = mkdtempSync(join(tmpdir(), "sbx-copy-abort-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A Manager whose upload waits until tar has filled every buffer, then fails unread. */
function failingUpload(): Manager {
  return {
    async putArchive(_owner: string, _id: string, _dir: string, tar: Readable): Promise<void> {
      // the archive stream stops growing once back-pressure reaches tar's pipe
      let last = -1;
      while (tar.readableLength !== last) {
        last = tar.readableLength;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new UpstreamError("the connection was lost during the PUT (test)");
    },
  } as unknown as Manager;
}

describe("copyIn, upload failing while tar is blocked", () => {
  it("rejects with the upload's error instead of hanging on the killed tar", async () => {
    const big = join(work, "big.bin");
    writeFileSync(big, randomBytes(8 * 1024 * 1024)); // far past a pipe's 64 KiB and the streams' buffers
    const settled = copyIn(failingUpload(), "alice", big, "sb-x", "/workspace").then(
      () => "resolved",
      (e: Error) => e.message,
    );
    const outcome = await Promise.race([
      settled,
      new Promise((r) => setTimeout(() => r("still pending after 10 s"), 10_000).unref()),
    ]);
    expect(outcome).toBe("the connection was lost during the PUT (test)");
  }, 20_000);
});
