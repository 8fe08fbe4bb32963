import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import type { TransferProgress } from "../core/types.ts";
import { formatBytes, formatTransfer, formatTransferDone, ProgressDisplay, summarizeTransfer } from "./progress.ts";

const pause = (path: string, bytes: number): TransferProgress => ({ op: "pause", path, bytes });
const resume = (path: string, bytes: number, totalBytes: number): TransferProgress => ({
  op: "resume",
  path,
  bytes,
  totalBytes,
});

describe("summarizeTransfer", () => {
  it.each([
    { name: "nothing yet", latest: [], ms: 0, want: { bytes: 0, mbPerSecond: 0 } },
    {
      name: "pause: no sizes, so no percent",
      latest: [pause("/workspace", 30e6), pause("/tmp", 10e6)],
      ms: 4000,
      want: { bytes: 40e6, mbPerSecond: 10 },
    },
    {
      name: "resume: sizes known",
      latest: [resume("/workspace", 30e6, 60e6), resume("/tmp", 10e6, 20e6)],
      ms: 2000,
      want: { bytes: 40e6, totalBytes: 80e6, percent: 50, mbPerSecond: 20 },
    },
    {
      name: "percent rounds down (never 100 before the end)",
      latest: [resume("/workspace", 999, 1000)],
      ms: 1000,
      want: { bytes: 999, totalBytes: 1000, percent: 99, mbPerSecond: 0.000999 },
    },
    {
      name: "a size missing on one path: no percent",
      latest: [resume("/workspace", 5, 10), pause("/tmp", 5)],
      ms: 1000,
      want: { bytes: 10, mbPerSecond: 0.00001 },
    },
    {
      name: "empty layers are complete",
      latest: [resume("/tmp", 0, 0)],
      ms: 1000,
      want: { bytes: 0, totalBytes: 0, percent: 100, mbPerSecond: 0 },
    },
  ])("$name", ({ latest, ms, want }) => {
    expect(summarizeTransfer(latest, ms)).toEqual(want);
  });
});

describe("formatting", () => {
  it.each([
    [0, "0 B"],
    [999, "999 B"],
    [1000, "1.0 kB"],
    [1_234_567, "1.2 MB"],
    [64_000_000, "64.0 MB"],
    [1_500_000_000, "1.5 GB"],
  ])("formatBytes(%d) = %s", (n, s) => expect(formatBytes(n)).toBe(s));

  it("names the operation, the sandbox, bytes, percent when known, and the rate", () => {
    expect(formatTransfer("pause", "sbx-1", { bytes: 12e6, mbPerSecond: 6 })).toBe("pausing sbx-1: 12.0 MB, 6.0 MB/s");
    expect(formatTransfer("resume", "sbx-1", { bytes: 12e6, totalBytes: 40e6, percent: 30, mbPerSecond: 6 })).toBe(
      "resuming sbx-1: 12.0 MB of 40.0 MB (30%), 6.0 MB/s",
    );
    expect(formatTransferDone("pause", "sbx-1", { bytes: 40e6, mbPerSecond: 6 }, 6700)).toBe(
      "paused sbx-1: 40.0 MB in 6.7 s (6.0 MB/s)",
    );
  });
});

function capture(): { out: PassThrough; text: () => string } {
  const out = new PassThrough();
  let text = "";
  out.on("data", (c) => (text += c));
  return { out, text: () => text };
}

describe("ProgressDisplay", () => {
  it("on a terminal redraws one line in place at most every interval, then leaves the summary", () => {
    let now = 0;
    const { out, text } = capture();
    const d = new ProgressDisplay({ verb: "resume", id: "sbx-1", out, tty: true, now: () => now, intervalMs: 100 });
    now = 1000;
    d.onProgress(resume("/workspace", 10e6, 40e6));
    now = 1050;
    d.onProgress(resume("/workspace", 15e6, 40e6)); // inside the interval: not drawn
    now = 2000;
    d.onProgress(resume("/workspace", 40e6, 40e6));
    d.done();
    expect(text()).toBe(
      "\r\x1b[Kresuming sbx-1: 10.0 MB of 40.0 MB (25%), 10.0 MB/s" +
        "\r\x1b[Kresuming sbx-1: 40.0 MB of 40.0 MB (100%), 20.0 MB/s" +
        "\r\x1b[Kresumed sbx-1: 40.0 MB in 2.0 s (20.0 MB/s)\n",
    );
  });

  it("elsewhere writes whole lines; a failure clears nothing and a no-op writes nothing", () => {
    let now = 0;
    const { out, text } = capture();
    const d = new ProgressDisplay({ verb: "pause", id: "sbx-2", out, tty: false, now: () => now });
    now = 500;
    d.onProgress(pause("/workspace", 5e6));
    now = 1000;
    d.onProgress(pause("/workspace", 6e6)); // within 1 s of the last line
    now = 1600;
    d.onProgress(pause("/workspace", 16e6));
    d.clear();
    expect(text()).toBe("pausing sbx-2: 5.0 MB, 10.0 MB/s\npausing sbx-2: 16.0 MB, 10.0 MB/s\n");

    const quiet = capture();
    new ProgressDisplay({ verb: "resume", id: "sbx-3", out: quiet.out, tty: true, now: () => now }).done();
    expect(quiet.text()).toBe("");
  });
});
