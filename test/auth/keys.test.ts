// An issuer's keys over time, against real issuers on loopback: rotation fetches a new kid once
// (not once per request, and not again for invented kids until the refetch interval has passed,
// read from the injected clock), and a JWKS that hangs, answers garbage or answers 10 MB is a 401
// for its own tokens only, while static tokens and another issuer's tokens answer meanwhile.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOKENS } from "../support/local.ts";
import { type Mode, TestIssuer } from "./issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "./support.ts";

let main: TestIssuer;
let broken: TestIssuer;
let t: AuthApp;
const now = () => Math.floor(t.clock.ms / 1000);

beforeAll(async () => {
  main = await new TestIssuer().start();
  broken = await new TestIssuer().start();
  t = await startAuthApp([issuerEntry("main", main.url), issuerEntry("broken", broken.url)]);
});
afterAll(async () => {
  await t?.close();
  await main?.close();
  await broken?.close();
});

const whoami = (token: string) =>
  t.app.inject({ method: "GET", url: "/v1/whoami", headers: { authorization: `Bearer ${token}` } });

const statuses = async (tokens: string[]) => (await Promise.all(tokens.map(whoami))).map((r) => r.statusCode);

describe("key rotation", () => {
  it("fetches the keys once for many requests", async () => {
    expect(await statuses(Array.from({ length: 30 }, () => main.token({}, { nowSeconds: now() })))).toEqual(
      Array(30).fill(200),
    );
    expect(main.jwksFetches).toBe(1);
    expect(main.discoveryFetches).toBe(1);
  });

  it("fetches a new kid once, shared by the requests that wait for it", async () => {
    main.rotateIn("rsa-2", "RS256", true);
    // the keys were fetched over the refetch interval ago (30 s, as jose's cooldown)
    t.clock.ms += 31_000;
    const tokens = Array.from({ length: 20 }, () => main.token({}, { kid: "rsa-2", nowSeconds: now() }));
    expect(await statuses(tokens)).toEqual(Array(20).fill(200));
    expect(main.jwksFetches).toBe(2);
  });

  it("does not refetch for invented kids until the interval has passed, then once", async () => {
    const ghost = () => main.token({}, { header: { kid: "ghost" }, nowSeconds: now() });
    expect(await statuses(Array.from({ length: 50 }, ghost))).toEqual(Array(50).fill(401));
    expect(main.jwksFetches).toBe(2);
    t.clock.ms += 31_000;
    expect(await statuses(Array.from({ length: 10 }, ghost))).toEqual(Array(10).fill(401));
    expect(main.jwksFetches).toBe(3);
  });

  it("a key published after the last fetch is found once the interval has passed", async () => {
    main.rotateIn("ec-2", "ES256", false);
    const early = await whoami(main.token({}, { kid: "ec-2", nowSeconds: now() }));
    expect(early.json().error.details.reason).toBe("unknown_key");
    main.published.add("ec-2");
    t.clock.ms += 31_000;
    expect((await whoami(main.token({}, { kid: "ec-2", nowSeconds: now() }))).statusCode).toBe(200);
    expect(main.jwksFetches).toBe(4);
  });
});

describe("a broken issuer", () => {
  it.each<[Mode, string]>([
    ["hang", "no complete answer within 500 ms"],
    ["garbage", "not JSON"],
    ["huge", "over the limit of 1048576 bytes"],
  ])("whose JWKS does %s refuses its own tokens, while others answer meanwhile", async (mode, why) => {
    broken.mode = mode;
    t.clock.ms += 10 * 60_000; // past any backoff left by the case before
    let settled = false;
    const pending = whoami(broken.token({}, { nowSeconds: now() })).finally(() => {
      settled = true;
    });
    // the static token and the healthy issuer's token answer while the broken issuer's is pending
    const [statik, other] = await Promise.all([whoami(TOKENS.alice), whoami(main.token({}, { nowSeconds: now() }))]);
    expect(statik.json()).toEqual({ owner: "alice", via: "token" });
    expect(other.statusCode).toBe(200);
    if (mode === "hang") expect(settled).toBe(false);
    const res = await pending;
    expect(res.statusCode).toBe(401);
    expect(res.json().error.details.reason).toBe("issuer_unavailable");
    expect(res.json().error.message).toContain(why);

    // remembered: the next token of that issuer is refused without another fetch
    const fetches = broken.jwksFetches;
    const again = await whoami(broken.token({}, { nowSeconds: now() }));
    expect(again.json().error.details.reason).toBe("issuer_unavailable");
    expect(broken.jwksFetches).toBe(fetches);
  });

  it("recovers once the issuer answers again and the backoff has passed", async () => {
    broken.mode = "ok";
    t.clock.ms += 10 * 60_000;
    const res = await whoami(broken.token({ sub: "carol" }, { nowSeconds: now() }));
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ owner: "carol", via: "broken" });
  });
});
