import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JsonlWriter } from "./jsonl.ts";
import { BENCH_SEED, SHAKE_BLOCK, shakeBlock, shakeStream } from "./shake.ts";
import { exitCodeFor, summarize, type TrialRecord } from "./summary.ts";
import { singleFileTar } from "./tar.ts";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "sbx-benchlib-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function collect(r: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of r as AsyncIterable<Buffer>) parts.push(p);
  return Buffer.concat(parts);
}

describe("seeded SHAKE256 stream", () => {
  it("is the concatenation of its blocks, deterministic, seed-dependent, and reports its SHA-256", async () => {
    const n = 2 * SHAKE_BLOCK + 4097;
    let reported = "";
    const a = await collect(shakeStream(BENCH_SEED, n, (h) => (reported = h)));
    expect(a.length).toBe(n);
    expect(a.subarray(0, SHAKE_BLOCK).equals(shakeBlock(BENCH_SEED, 0))).toBe(true);
    expect(a.subarray(2 * SHAKE_BLOCK).equals(shakeBlock(BENCH_SEED, 2).subarray(0, 4097))).toBe(true);
    expect(reported).toBe(createHash("sha256").update(a).digest("hex"));
    expect((await collect(shakeStream(BENCH_SEED, n))).equals(a)).toBe(true);
    expect(shakeBlock(BENCH_SEED + 1, 0).equals(shakeBlock(BENCH_SEED, 0))).toBe(false);
    expect(shakeBlock(BENCH_SEED, 1).equals(shakeBlock(BENCH_SEED, 0))).toBe(false);
    // not compressible: gzip cannot shrink it
    const gz = execFileSync("gzip", ["-c"], { input: a.subarray(0, SHAKE_BLOCK), maxBuffer: 4 * SHAKE_BLOCK });
    expect(gz.length).toBeGreaterThan(SHAKE_BLOCK);
  });
});

describe("singleFileTar", () => {
  it.each([0, 1, 511, 512, 513, 3 * SHAKE_BLOCK + 5])("unpacks with GNU tar to the same %i bytes", async (size) => {
    const data = await collect(shakeStream(1, size));
    const tar = await collect(singleFileTar("payload.bin", size, Readable.from([data])));
    expect(tar.length % 512).toBe(0);
    execFileSync("tar", ["-C", dir, "-xf", "-"], { input: tar });
    expect(readFileSync(join(dir, "payload.bin")).equals(data)).toBe(true);
  });
  it("fails when the stream is shorter than declared", async () => {
    await expect(collect(singleFileTar("x", 10, Readable.from([Buffer.alloc(5)])))).rejects.toThrow(
      "tar: x declared 10 bytes but the stream gave 5",
    );
  });
});

describe("JsonlWriter", () => {
  it("writes one line per record and never overwrites an existing file", () => {
    const p = join(dir, "out.jsonl");
    const w = new JsonlWriter(p);
    w.write({ type: "environment", a: 1 });
    w.write({ type: "trial", index: 0 });
    expect(readFileSync(p, "utf8")).toBe('{"type":"environment","a":1}\n{"type":"trial","index":0}\n');
    w.close();
    expect(() => new JsonlWriter(p)).toThrow(
      `output ${p} already exists: results are never overwritten; pass a new --output path`,
    );
    expect(readFileSync(p, "utf8").split("\n")).toHaveLength(3);
  });
});

describe("summarize", () => {
  const t = (index: number, warmup: boolean, ok: boolean, ms?: number, cleanup?: string): TrialRecord => ({
    type: "trial",
    index,
    warmup,
    ok,
    timings: ms === undefined ? {} : { command_ms: ms, api_ack_ms: ms / 2 },
    ...(ok ? {} : { failed_stage: "resume", error: "boom" }),
    ...(cleanup ? { cleanup_error: cleanup } : {}),
  });

  it("uses only successful measured trials; warmups and failed trials never enter percentiles", () => {
    const trials = [
      t(0, true, true, 1),
      t(1, false, true, 100),
      t(2, false, false, 1),
      t(3, false, true, 300),
      t(4, false, true, 200),
    ];
    const s = summarize(trials, 4, ["command_ms", "api_ack_ms"]);
    expect(s.metrics.command_ms).toEqual({ n: 3, p50: 200, p95: 300, min: 100, max: 300 });
    expect(s.metrics.api_ack_ms.p50).toBe(100);
    expect([
      s.measured_trials,
      s.successful_trials,
      s.failed_trials,
      s.failure_rate,
      s.completed_requested_trials,
    ]).toEqual([4, 3, 1, 0.25, true]);
    expect(exitCodeFor(trials, s)).toBe(1);
  });

  it("all failed -> null percentiles; cleanup failures counted; early stop is incomplete", () => {
    const trials = [t(0, false, false), t(1, false, true, 5, "delete sb-1: 502")];
    const s = summarize(trials, 5, ["command_ms"]);
    expect(s.metrics.command_ms).toEqual({ n: 1, p50: 5, p95: 5, min: 5, max: 5 });
    expect(summarize([t(0, false, false)], 1, ["command_ms"]).metrics.command_ms.p50).toBeNull();
    expect(s.cleanup_failures).toBe(1);
    expect(s.completed_requested_trials).toBe(false);
  });

  it("exit 0 only when every trial and cleanup succeeded and the run completed", () => {
    const ok = [t(0, true, true, 1), t(1, false, true, 2)];
    expect(exitCodeFor(ok, summarize(ok, 1, ["command_ms"]))).toBe(0);
    const warmFail = [t(0, true, false), t(1, false, true, 2)];
    expect(exitCodeFor(warmFail, summarize(warmFail, 1, ["command_ms"]))).toBe(1);
  });
});
