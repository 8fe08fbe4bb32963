// Authentication cost per request (docs/identity.md, docs/benchmarks.md "Identities"): what the
// service's auth hook spends in Identities.identify for a static token (sha256 + a constant-time
// compare against every entry of the tokens file) and for a JWT with a warm key cache (decode,
// algorithm check, signature verify with node:crypto, claims, mapping), RS256 and ES256, in one
// run, interleaved round by round so all three see the same machine load. The issuer's keys are
// handed in through the injected fetch: no network in the measured path (there is none there in
// production either, once warm). Prints a JSON document and a table. Asserts nothing.
//
//   npx tsx bench/auth.ts [--samples 20000] [--static-tokens 100] [--output auth.json]
import { generateKeyPairSync, type KeyObject, randomBytes, sign } from "node:crypto";
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { buildIdentities, type Identities } from "../runtime/auth/identities.ts";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { silentLogger } from "../runtime/core/log.ts";
import { hashToken, TokenStore } from "../runtime/core/tokens.ts";
import { nearestRank } from "./lib/percentile.ts";
import { flags, intFlag, runnerEnvironment } from "./lib/target.ts";

const ISSUER = "https://issuer.bench.invalid";

interface Key {
  kid: string;
  alg: "RS256" | "ES256";
  privateKey: KeyObject;
  publicKey: KeyObject;
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");

function jwt(key: Key, sub: string, nowSeconds: number): string {
  const input = `${b64({ alg: key.alg, kid: key.kid, typ: "JWT" })}.${b64({
    iss: ISSUER,
    aud: "sbx",
    sub,
    groups: ["eng", "sbx-team-bench"],
    iat: nowSeconds,
    exp: nowSeconds + 3600,
  })}`;
  const sig =
    key.alg === "RS256"
      ? sign("sha256", Buffer.from(input), key.privateKey)
      : sign("sha256", Buffer.from(input), { key: key.privateKey, dsaEncoding: "ieee-p1363" });
  return `${input}.${sig.toString("base64url")}`;
}

function setup(staticTokens: number): { identities: Identities; keys: Key[]; statics: string[] } {
  const keys: Key[] = [
    { kid: "rsa", alg: "RS256", ...generateKeyPairSync("rsa", { modulusLength: 2048 }) },
    { kid: "ec", alg: "ES256", ...generateKeyPairSync("ec", { namedCurve: "P-256" }) },
  ];
  const jwks = { keys: keys.map((k) => ({ ...k.publicKey.export({ format: "jwk" }), kid: k.kid, alg: k.alg })) };
  const statics = Array.from({ length: staticTokens }, () => `sbx_${randomBytes(32).toString("base64url")}`);
  const store = new TokenStore(new Map(statics.map((t, i) => [hashToken(t), `owner-${i}`])));
  const config = validateRuntimeConfig({
    auth: {
      issuers: [
        { name: "bench", issuer: ISSUER, audiences: ["sbx"], team: { claim: "groups", stripPrefix: "sbx-team-" } },
      ],
    },
  });
  const identities = buildIdentities(config, store, {
    now: () => Date.now(),
    logger: silentLogger(),
    fetch: async (url) =>
      url.endsWith("/openid-configuration") ? { issuer: ISSUER, jwks_uri: `${ISSUER}/jwks` } : jwks,
  });
  return { identities, keys, statics };
}

function summary(samples: number[]) {
  const r = (p: number) => Math.round((nearestRank(samples, p) ?? 0) * 1000) / 1000;
  return { n: samples.length, p50_ms: r(50), p90_ms: r(90), p99_ms: r(99), max_ms: r(100) };
}

async function main(): Promise<void> {
  const f = flags(process.argv.slice(2));
  const samples = intFlag(f, "samples", 20_000, 100);
  const { identities, keys, statics } = setup(intFlag(f, "static-tokens", 100, 1));
  await identities.warm();
  const now = Math.floor(Date.now() / 1000);
  // a pool of distinct tokens per kind: nothing is cached per token, and this shows it
  const pools: Record<string, string[]> = {
    static: statics,
    jwt_rs256: Array.from({ length: 200 }, (_, i) => jwt(keys[0], `user-${i}`, now)),
    jwt_es256: Array.from({ length: 200 }, (_, i) => jwt(keys[1], `user-${i}`, now)),
  };
  const times: Record<string, number[]> = { static: [], jwt_rs256: [], jwt_es256: [] };
  const warmup = Math.min(2000, samples / 10);
  for (let i = 0; i < samples + warmup; i++) {
    for (const kind of Object.keys(pools)) {
      const token = pools[kind][i % pools[kind].length];
      const t0 = performance.now();
      await identities.identify(token);
      const dt = performance.now() - t0;
      if (i >= warmup) times[kind].push(dt);
    }
  }
  const fetches = identities.issuers[0].keys.fetches;
  const result = {
    bench: "auth",
    samples,
    static_tokens_in_file: statics.length,
    jwks_fetches_during_run: fetches,
    results: Object.fromEntries(Object.entries(times).map(([k, v]) => [k, summary(v)])),
    environment: runnerEnvironment(),
  };
  const out = f.get("output");
  if (out) writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  console.log(JSON.stringify(result, null, 2));
  console.log("\n| credential | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|---|");
  for (const [k, s] of Object.entries(result.results))
    console.log(`| ${k} | ${s.n} | ${s.p50_ms} | ${s.p90_ms} | ${s.p99_ms} | ${s.max_ms} |`);
}

await main();
