// Warm pods' channels opened before a claim, against the real helper on this machine and an
// injected clock: each claimable pod gets one open, kept past the idle time while unused; a claim
// moves it to the sandbox, whose commands then open nothing; a pod that left the claimable set
// has its channel closed; at most `max` are primed; one that broke is opened again, and one where
// the helper cannot run is not tried again.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../core/clock.ts";
import { silentLogger } from "../../core/log.ts";
import type { CommandChannel } from "./channel.ts";
import { ChannelPool } from "./pool.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";
import { WarmChannels } from "./warmChannels.ts";

let local: LocalHelper;

beforeAll(async () => {
  local = await startLocalHelper("sbx-warmch-");
});

afterAll(() => local?.close());

const pod = (name: string) => ({ metadata: { name } }) as V1Pod;
const flush = () => new Promise((r) => setTimeout(r, 20));
let n = 0;
const run = (c: CommandChannel) => c.start({ id: `warm-${process.pid}-${++n}`, argv: ["true"], env: {}, cwd: "/" });

function setup(o: { max?: number; fallback?: (pod: string) => boolean } = {}) {
  const clock = new ManualClock();
  const opens: string[] = [];
  const pool = new ChannelPool({
    clock,
    logger: silentLogger(),
    idleMs: 60_000,
    open: async (name) => {
      opens.push(name);
      if (o.fallback?.(name)) return { fallback: "no /bin/sh" };
      return { channel: await local.openChannel(name, clock) };
    },
  });
  let claimable: V1Pod[] = [];
  const warm = new WarmChannels({ pool, claimable: () => claimable, clock, logger: silentLogger(), max: o.max });
  return {
    clock,
    opens,
    pool,
    warm,
    setClaimable: (names: string[]) => (claimable = names.map(pod)),
    close: () => {
      warm.close();
      pool.close();
    },
  };
}

describe("WarmChannels", () => {
  it("primes each claimable pod once, keeps it open unused, and hands it to the claiming sandbox", async () => {
    const t = setup();
    t.setClaimable(["warm-a", "warm-b"]);
    t.warm.sync();
    await flush();
    t.warm.sync(); // a second look while open opens nothing more
    await flush();
    expect(t.opens.sort()).toEqual(["warm-a", "warm-b"]);
    expect(t.warm.count()).toBe(2);
    const primed = t.pool.current("warm:warm-a")!;
    await t.clock.advance(120_000); // unused, a primed channel has no idle timer
    expect(primed.closed).toBe(false);

    expect(t.warm.claim("warm-a", "sbx-one")).toBe(true);
    expect(t.pool.current("sbx-one")).toBe(primed);
    const s = await t.pool.with("sbx-one", "warm-a", run, (x) => x.result);
    expect((await s!.result).exitCode).toBe(0);
    expect(t.opens.filter((p) => p === "warm-a")).toHaveLength(1); // the command opened nothing
    // still listed as warm until the informer sees the claim: not primed again
    t.warm.sync();
    await flush();
    expect(t.opens.filter((p) => p === "warm-a")).toHaveLength(1);
    expect(t.warm.count()).toBe(1);
    t.close();
  });

  it("closes the channel of a pod that is no longer claimable here, and primes at most max", async () => {
    const t = setup({ max: 2 });
    t.setClaimable(["warm-a", "warm-b", "warm-c"]);
    t.warm.sync();
    await flush();
    expect(t.opens.sort()).toEqual(["warm-a", "warm-b"]);
    const b = t.pool.current("warm:warm-b")!;
    t.setClaimable(["warm-a", "warm-c"]); // warm-b went to another replica's part, or was deleted
    t.warm.sync();
    await flush();
    expect(b.closed).toBe(true);
    expect(t.opens.sort()).toEqual(["warm-a", "warm-b", "warm-c"]);
    expect(t.warm.stats).toMatchObject({ primed: 3, closed: 1 });
    // a claim of a pod with nothing primed moves nothing
    expect(t.warm.claim("warm-z", "sbx-two")).toBe(false);
    t.close();
    expect(t.pool.keys()).toEqual([]);
  });

  it("opens again a primed channel that broke, and never retries a pod where the helper cannot run", async () => {
    const t = setup({ fallback: (name) => name === "warm-old" });
    t.setClaimable(["warm-a", "warm-old"]);
    t.warm.sync();
    await flush();
    const first = t.pool.current("warm:warm-a")!;
    first.close("the exec stream broke");
    t.warm.sync();
    await flush();
    const second = t.pool.current("warm:warm-a")!;
    expect(second).toBeDefined();
    expect(second).not.toBe(first);
    expect(t.pool.mode("warm:warm-old")).toBe("exec");
    expect(t.opens.filter((p) => p === "warm-old")).toHaveLength(1);
    t.close();
  });

  it("runs its comparison on the clock and stops when closed", async () => {
    const t = setup();
    t.warm.start();
    await flush();
    t.setClaimable(["warm-a"]);
    expect(t.opens).toEqual([]);
    await t.clock.advance(1_000);
    await flush();
    expect(t.opens).toEqual(["warm-a"]);
    t.close();
    t.setClaimable(["warm-a", "warm-b"]);
    await t.clock.advance(5_000);
    await flush();
    expect(t.opens).toEqual(["warm-a"]);
  });
});

describe("ChannelPool.move", () => {
  it("moves a channel still opening, which then serves the new key", async () => {
    const t = setup();
    const priming = t.pool.prime("warm:warm-a", "warm-a");
    expect(t.pool.move("warm:warm-a", "sbx-one", "warm-a")).toBe(true);
    await priming;
    const c = t.pool.current("sbx-one");
    expect(c?.closed).toBe(false);
    expect(t.pool.keys()).toEqual(["sbx-one"]);
    // not to a key that has an entry, nor for another pod
    await t.pool.prime("warm:warm-b", "warm-b");
    expect(t.pool.move("warm:warm-b", "sbx-one", "warm-b")).toBe(false);
    expect(t.pool.move("warm:warm-b", "sbx-two", "warm-x")).toBe(false);
    // forget with a pod leaves another pod's channel alone
    t.pool.forget("sbx-one", "warm-b");
    expect(t.pool.current("sbx-one")).toBe(c);
    t.pool.forget("sbx-one", "warm-a");
    expect(c?.closed).toBe(true);
    t.close();
  });
});
