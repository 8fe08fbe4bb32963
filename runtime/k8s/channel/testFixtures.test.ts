// The local helper fixture cleans up after itself: the daemons its channels started outlive
// those channels by design, so a fixture that forgot them would leave one daemon per test file
// running on the (shared) machine, and its temporary directory behind.
import { existsSync, readFileSync } from "node:fs";
import { afterAll, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper | undefined;
afterAll(() => local?.close());

/** alive and not a zombie (a daemon nobody reaped yet is gone for every purpose here) */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

async function until(what: string, probe: () => boolean, timeoutMs: number): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !probe(); ) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it("close() kills the daemons its channels started, which outlive the channels, and removes its directory", async () => {
  local = await startLocalHelper("sbx-fixture-");
  const channel = await local.openChannel("p", systemClock);
  const { daemonPid } = await channel.hello;
  channel.close();
  // the premise: closing the channel leaves its daemon running
  await new Promise((r) => setTimeout(r, 200));
  expect(running(daemonPid), `daemon ${daemonPid} after its channel closed`).toBe(true);
  expect(existsSync(local.dir)).toBe(true);

  local.close();
  // generous: SIGKILL is immediate, but a loaded 2-core machine may be slow to reap
  await until(`daemon ${daemonPid} to be gone`, () => !running(daemonPid), 30_000);
  expect(existsSync(local.root)).toBe(false);
});
