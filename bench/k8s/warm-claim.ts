// Warm claim latency with 40 concurrent claimers on the Kubernetes backend: each round, 40
// creates arrive at once through the Manager (the warm path: an atomic resourceVersion-guarded
// relabel of a ready pool pod, no readiness wait), then the claimed sandboxes are killed and
// the pool refills. Reports claim latency (server-side create-accept on the warm path), hits,
// misses and 409 conflicts.
//   npx tsx bench/k8s/warm-claim.ts [--rounds 5] [--claimers 40] [--pool 50]
import { performance } from "node:perf_hooks";
import { arg, benchRuntime, stats, table } from "./env.ts";

const rounds = Number(arg("rounds", "5"));
const claimers = Number(arg("claimers", "40"));
const pool = Number(arg("pool", "50"));
const rt = await benchRuntime(
  "bench-claim",
  {
    budget: { cpu: "64", memory: "256Gi" },
    defaults: { size: "nano", idleTimeoutSeconds: 0 },
    warmPool: [{ profile: "base", size: "nano", count: pool }],
  },
  4,
);
const claim: number[] = [];
const rows = [];
let hits = 0;
let misses = 0;
try {
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < 1200; i++) {
      const st = (await rt.backend.poolStatus!())[0];
      if (st.ready >= pool) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const before = { ...rt.platform.testing.warmPool.stats };
    const lat: number[] = [];
    const made = await Promise.all(
      Array.from({ length: claimers }, async (_, c) => {
        const t0 = performance.now();
        const sb = await rt.manager.create({ owner: `claimer-${c}`, profile: "base", size: "nano" });
        lat.push(performance.now() - t0);
        return sb;
      }),
    );
    const warm = made.filter((s) => s.warm).length;
    hits += warm;
    misses += made.length - warm;
    claim.push(...lat);
    const after = rt.platform.testing.warmPool.stats;
    rows.push({
      round: r + 1,
      ...stats(lat),
      warm,
      cold: made.length - warm,
      conflicts: after.conflicts - before.conflicts,
    });
    await Promise.all(made.map((s) => rt.manager.kill(s.owner, s.id)));
  }
} finally {
  await rt.close();
}
console.log(
  JSON.stringify(
    { bench: "k8s-warm-claim", claimers, pool, rounds, claim: stats(claim), hits, misses, perRound: rows },
    null,
    2,
  ),
);
console.log(
  table(
    rows.map((r) => ({
      round: r.round,
      "p50 ms": r.p50,
      "p99 ms": r.p99,
      "max ms": r.max,
      warm: r.warm,
      cold: r.cold,
      "409s": r.conflicts,
    })),
  ),
);
process.exit(0);
