// The pure pieces of bench/k8s/replicas.ts's streaming scenario: the histogram window the
// server-side create-accept is read from, the open-loop probe schedule, and the NDJSON tally
// that decides whether a streaming exec ended with all its output.
import { describe, expect, it } from "vitest";
import { ExecFrameTally } from "./execFrames.ts";
import { bucketDelta, bucketQuantile, bucketTotal, parseBuckets, sampleOf, sumBuckets } from "./histogramWindow.ts";
import { planProbes } from "./planProbes.ts";

const INF = Number.POSITIVE_INFINITY;
const exposition = (cold: number[], warm: number[]) =>
  [
    "# HELP sbx_create_accept_seconds create",
    "# TYPE sbx_create_accept_seconds histogram",
    ...[0.001, 0.005, 0.05, "+Inf"].flatMap((le, i) => [
      `sbx_create_accept_seconds_bucket{le="${le}",outcome="ok",path="cold"} ${cold[i]}`,
      `sbx_create_accept_seconds_bucket{le="${le}",outcome="ok",path="warm"} ${warm[i]}`,
      `sbx_create_accept_seconds_bucket{le="${le}",outcome="capacity",path="cold"} 7`,
    ]),
    `sbx_create_accept_seconds_sum{outcome="ok",path="cold"} 1.5`,
    `sbx_create_accept_seconds_count{outcome="ok",path="cold"} ${cold[3]}`,
    "sbx_process_nodejs_eventloop_lag_p99_seconds 0.0123",
    "sbx_process_nodejs_eventloop_lag_p99_seconds_other 9",
  ].join("\n");

describe("histogram window", () => {
  it("reads only the matching series' buckets, cumulative per le", () => {
    const b = parseBuckets(exposition([1, 2, 3, 4], [10, 20, 30, 40]), "sbx_create_accept_seconds", {
      path: "cold",
      outcome: "ok",
    });
    expect([...b]).toEqual([
      [0.001, 1],
      [0.005, 2],
      [0.05, 3],
      [INF, 4],
    ]);
    // without labels every series adds up: 1 + 10 + 7
    expect(parseBuckets(exposition([1, 2, 3, 4], [10, 20, 30, 40]), "sbx_create_accept_seconds").get(0.001)).toBe(18);
  });

  it("counts only what happened between the reads, summed over replicas", () => {
    const read = (cold: number[]) =>
      parseBuckets(exposition(cold, [0, 0, 0, 0]), "sbx_create_accept_seconds", { path: "cold", outcome: "ok" });
    // 500 setup creates all <= 1 ms before the window; in it, 10 more of which 6 took > 5 ms
    const before = read([500, 500, 500, 500]);
    const after = read([502, 504, 510, 510]);
    const w = bucketDelta(after, before);
    expect(bucketTotal(w)).toBe(10);
    // cumulative 2, 4, 10: the median lies in the 50 ms bucket, which the whole run would hide
    expect(bucketQuantile(w, 0.5)).toBe(0.05);
    expect(bucketQuantile(after, 0.5)).toBe(0.001);
    const two = sumBuckets([w, w]);
    expect(bucketTotal(two)).toBe(20);
    expect(bucketQuantile(two, 0.2)).toBe(0.001);
    expect(bucketQuantile(two, 0.3)).toBe(0.005);
  });

  it.each<[number[], number, number | null]>([
    [[0, 0, 0, 0], 0.5, null],
    [[4, 4, 4, 4], 0.99, 0.001],
    [[1, 2, 3, 4], 0.25, 0.001],
    [[1, 2, 3, 4], 0.5, 0.005],
    [[1, 2, 3, 4], 0.75, 0.05],
    [[1, 2, 3, 4], 0.99, INF],
  ])("buckets %j: q%d is at or under %d", (cold, q, want) => {
    const b = parseBuckets(exposition(cold, [0, 0, 0, 0]), "sbx_create_accept_seconds", {
      path: "cold",
      outcome: "ok",
    });
    expect(bucketQuantile(b, q)).toBe(want);
  });

  it("refuses a window across a counter reset, and a q outside (0, 1]", () => {
    const b = (n: number) => new Map([[INF, n]]);
    expect(() => bucketDelta(b(3), b(5))).toThrow("le=Infinity went from 5 to 3: counter reset");
    expect(() => bucketQuantile(b(1), 0)).toThrow("q must be in (0, 1], got 0");
    expect(() => bucketQuantile(b(1), 50)).toThrow("got 50");
  });

  it("reads an unlabelled sample by its exact name", () => {
    const text = exposition([0, 0, 0, 0], [0, 0, 0, 0]);
    expect(sampleOf(text, "sbx_process_nodejs_eventloop_lag_p99_seconds")).toBe(0.0123);
    expect(sampleOf(text, "sbx_missing")).toBeUndefined();
  });
});

describe("planProbes", () => {
  it("one every interval, round-robin, at fixed offsets that do not drift", () => {
    expect(planProbes(250, 50, 3)).toEqual([
      { atMs: 0, replica: 0 },
      { atMs: 50, replica: 1 },
      { atMs: 100, replica: 2 },
      { atMs: 150, replica: 0 },
      { atMs: 200, replica: 1 },
    ]);
    const long = planProbes(25_000, 50, 3);
    expect(long).toHaveLength(500);
    expect(long.at(-1)).toEqual({ atMs: 24_950, replica: 499 % 3 });
    expect([0, 1, 2].map((r) => long.filter((p) => p.replica === r).length)).toEqual([167, 167, 166]);
    expect(planProbes(0, 50, 3)).toEqual([]);
    expect(planProbes(-5, 50, 3)).toEqual([]);
  });
  it.each<[number, number, string]>([
    [0, 3, "intervalMs must be > 0, got 0"],
    [50, 0, "replicas must be a positive integer, got 0"],
    [50, 1.5, "got 1.5"],
  ])("refuses interval %d over %d replicas", (every, n, msg) => expect(() => planProbes(100, every, n)).toThrow(msg));
});

describe("ExecFrameTally", () => {
  const enc = (s: string) => new TextEncoder().encode(s);
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  const frames = (ticks: number, end: string) =>
    [
      JSON.stringify({ started: true }),
      ...Array.from({ length: ticks }, (_, i) => JSON.stringify({ stream: "stdout", data: b64(`tick ${i + 1}\n`) })),
      JSON.stringify({ stream: "stderr", data: b64("warn\n") }),
      end,
      "",
    ].join("\n");
  const all = "tick 1\ntick 2\ntick 3\n".length;

  it("reassembles frames split anywhere and times the first output", () => {
    const text = frames(3, JSON.stringify({ exit: { exitCode: 0, timedOut: false } }));
    const bytes = enc(text);
    const t = new ExecFrameTally();
    for (let i = 0; i < bytes.length; i += 7) t.feed(bytes.subarray(i, i + 7), i);
    expect(t.stdoutBytes).toBe(all);
    expect(t.stderrBytes).toBe(5);
    // the first chunk that completes the first stdout frame
    expect(t.firstOutputAt).toBe(Math.floor((text.indexOf("\n", text.indexOf("stdout")) + 1) / 7) * 7);
    expect(t.verdict(all)).toBe("complete");
  });

  it.each<[string, number, string]>([
    ["complete", 3, JSON.stringify({ exit: { exitCode: 0, timedOut: false } })],
    ["short output", 2, JSON.stringify({ exit: { exitCode: 0, timedOut: false } })],
    ["timed out", 3, JSON.stringify({ exit: { exitCode: 137, timedOut: true } })],
    ["exit nonzero", 3, JSON.stringify({ exit: { exitCode: 1, timedOut: false } })],
    ["error", 1, JSON.stringify({ error: { code: "unavailable", message: "channel broke" } })],
    ["cut off", 3, ""],
    ["error", 3, "{not json"],
  ])("%s", (want, ticks, end) => {
    const t = new ExecFrameTally();
    t.feed(enc(frames(ticks, end)), 1);
    expect(t.verdict(all)).toBe(want);
  });

  it("decodes a character split between two chunks", () => {
    const t = new ExecFrameTally();
    const bytes = enc(`${JSON.stringify({ error: { code: "unavailable", message: "канал ω closed" } })}\n`);
    for (let i = 0; i < bytes.length; i++) t.feed(bytes.subarray(i, i + 1), i);
    expect(t.error).toEqual({ code: "unavailable", message: "канал ω closed" });
  });

  it("an error set by the caller (a refusal, a broken connection) wins over everything", () => {
    const t = new ExecFrameTally();
    t.feed(enc(frames(3, JSON.stringify({ exit: { exitCode: 0, timedOut: false } }))), 1);
    t.error = { code: "network", message: "socket hang up" };
    expect(t.verdict(all)).toBe("error");
  });
});
