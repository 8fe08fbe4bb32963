// Commands on a pseudo-terminal over the command channel, against the real helper daemon run
// locally (the same code runs in a pod; test/k8s/channel/pty.test.ts covers the cluster path):
// the terminal's last output before the exit is not lost, the end of stdin is the terminal's ^D,
// a program that cannot start says so on the terminal's one stream, and a bad window is refused.
import type { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import type { CommandChannel } from "./channel.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper;
let ch: CommandChannel;
let n = 0;
const id = () => `pty-${process.pid}-${++n}`;
const size = { cols: 80, rows: 24 };

async function text(s: Readable): Promise<string> {
  let out = "";
  for await (const c of s) out += c.toString();
  return out;
}

beforeAll(async () => {
  local = await startLocalHelper("sbx-pty-");
  ch = await local.openChannel("local", systemClock);
});

afterAll(() => {
  ch?.close();
  local?.close();
});

describe("a command on a pty over the channel (local daemon)", () => {
  it("keeps the terminal's last output of a command that exits at once, for every one of 40", async () => {
    const runs = Array.from({ length: 40 }, async (_, i) => {
      const s = ch.start({ id: id(), argv: ["printf", `tail-${i}-end`], env: {}, cwd: "/", pty: size });
      const [out, r] = await Promise.all([text(s.stdout), s.result]);
      return { out, code: r.exitCode, i };
    });
    for (const { out, code, i } of await Promise.all(runs)) {
      expect(code).toBe(0);
      expect(out).toBe(`tail-${i}-end`);
    }
  });

  it("ends its input with the terminal's ^D, and reports no stderr", async () => {
    const s = ch.start({ id: id(), argv: ["cat"], env: {}, cwd: "/", pty: size, stdin: Buffer.from("typed\n") });
    const [out, err, r] = await Promise.all([text(s.stdout), text(s.stderr), s.result]);
    expect(r.exitCode).toBe(0);
    expect(out).toContain("typed\r\n"); // the echo and cat's copy, both through the terminal
    expect(err).toBe("");
  });

  it("says on the terminal why a program cannot start: 127 for a missing one", async () => {
    const s = ch.start({ id: id(), argv: ["no-such-program-xyz"], env: {}, cwd: "/", pty: size });
    const [out, err, r] = await Promise.all([text(s.stdout), text(s.stderr), s.result]);
    expect(r.exitCode).toBe(127);
    expect(out).toContain("no-such-program-xyz");
    expect(err).toBe("");
  });

  it("refuses a window the daemon cannot set, and runs nothing", async () => {
    const s = ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/", pty: { cols: 0, rows: 24 } });
    await expect(s.result).rejects.toMatchObject({ details: { refusal: "malformed pty size" } });
  });
});
