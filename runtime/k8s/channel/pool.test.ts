// The channel pool on an injected clock: one open shared by concurrent first calls, closed
// after the idle time with nothing in flight (and not while a command runs), re-opened on
// demand; a pod that cannot run the helper is remembered as "exec".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../core/clock.ts";
import { silentLogger } from "../../core/log.ts";
import type { CommandChannel } from "./channel.ts";
import { ChannelPool } from "./pool.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper;

beforeAll(async () => {
  local = await startLocalHelper("sbx-pool-");
});

afterAll(() => local?.close());

function pool(clock: ManualClock, opens: string[], fallback?: string) {
  return new ChannelPool({
    clock,
    logger: silentLogger(),
    idleMs: 60_000,
    open: async (pod) => {
      opens.push(pod);
      if (fallback) return { fallback };
      return { channel: await local.openChannel(pod, clock) };
    },
  });
}

const flush = () => new Promise((r) => setTimeout(r, 20));
let n = 0;
const start = (c: CommandChannel, argv: string[]) =>
  c.start({ id: `pool-${process.pid}-${++n}`, argv, env: {}, cwd: "/" });

describe("ChannelPool", () => {
  it("opens once for concurrent first calls, closes when idle, not while busy, and re-opens", async () => {
    const clock = new ManualClock();
    const opens: string[] = [];
    const p = pool(clock, opens);
    const settled = (s: ReturnType<typeof start>) => s.result;
    const [a, b] = await Promise.all([
      p.with("sb", "pod-1", (c) => start(c, ["true"]), settled),
      p.with("sb", "pod-1", (c) => start(c, ["true"]), settled),
    ]);
    expect(opens).toEqual(["pod-1"]);
    await Promise.all([a!.result, b!.result]);
    await flush();
    const first = p.current("sb")!;
    await clock.advance(59_000);
    // a command started before the idle time is up keeps the channel past it
    const c = await p.with("sb", "pod-1", (ch) => start(ch, ["sleep", "1"]), settled);
    await clock.advance(61_000);
    await flush();
    expect(first.closed, "closed under a running command").toBe(false);
    await c!.result;
    await flush();
    await clock.advance(59_000);
    await flush();
    expect(first.closed).toBe(false);
    await clock.advance(2_000);
    await flush();
    expect(first.closed).toBe(true);
    expect(p.mode("sb")).toBe("helper");
    const again = await p.with("sb", "pod-1", (c) => start(c, ["true"]), settled);
    expect((await again!.result).exitCode).toBe(0);
    expect(opens).toEqual(["pod-1", "pod-1"]);
    p.close();
  });

  it("stops the idle timer of a channel used again without building a DOMException", async () => {
    const clock = new ManualClock();
    const signals: AbortSignal[] = [];
    const sleep = clock.sleep.bind(clock);
    clock.sleep = (ms, s) => {
      if (s) signals.push(s);
      return sleep(ms, s);
    };
    const p = pool(clock, []);
    const settled = (s: ReturnType<typeof start>) => s.result;
    await (await p.with("sb", "pod-1", (c) => start(c, ["true"]), settled))!.result;
    await flush();
    await (await p.with("sb", "pod-1", (c) => start(c, ["true"]), settled))!.result;
    expect(signals.length).toBeGreaterThan(0);
    expect(signals[0].aborted).toBe(true);
    // abort() without a reason makes a DOMException with its stack trace, once per command
    expect(signals[0].reason).not.toBeInstanceOf(DOMException);
    p.close();
  });

  it("remembers a pod where the helper cannot run as exec and does not try again", async () => {
    const opens: string[] = [];
    const p = pool(new ManualClock(), opens, "no /bin/sh");
    expect(
      await p.with(
        "sb",
        "pod-1",
        () => "used",
        async () => undefined,
      ),
    ).toBeUndefined();
    expect(
      await p.with(
        "sb",
        "pod-1",
        () => "used",
        async () => undefined,
      ),
    ).toBeUndefined();
    expect(p.mode("sb")).toBe("exec");
    expect(opens).toEqual(["pod-1"]);
    p.close();
  });
});
