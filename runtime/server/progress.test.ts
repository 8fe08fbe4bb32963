import { describe, expect, it } from "vitest";
import type { TransferProgress } from "../core/types.ts";
import { ProgressThrottle, prefersNdjson, shouldStreamProgress } from "./progress.ts";

describe("shouldStreamProgress", () => {
  it.each([
    { query: {}, accept: undefined, want: false },
    { query: {}, accept: "application/json", want: false },
    { query: {}, accept: "*/*", want: false },
    { query: {}, accept: "application/x-ndjson", want: true },
    { query: {}, accept: "application/json, application/x-ndjson", want: true },
    { query: {}, accept: "application/x-ndjson;q=0.5, application/json", want: false },
    { query: {}, accept: "application/x-ndjson;q=0", want: false },
    { query: {}, accept: "Application/X-NDJSON; q=0.9", want: true },
    { query: { progress: "true" }, accept: undefined, want: true },
    { query: { progress: "1" }, accept: "application/json", want: true },
    { query: { progress: "false" }, accept: "application/x-ndjson", want: false },
    { query: { progress: "0" }, accept: "application/x-ndjson", want: false },
  ])("query $query, Accept $accept -> $want", ({ query, accept, want }) => {
    expect(shouldStreamProgress(query, accept)).toBe(want);
    if (query.progress === undefined) expect(prefersNdjson(accept)).toBe(want);
  });
});

describe("ProgressThrottle", () => {
  const p = (path: string, bytes: number): TransferProgress => ({ op: "pause", path, bytes });

  it("hands out the latest report per path at most once per interval, and everything left on flush", () => {
    let now = 1000;
    const t = new ProgressThrottle(250, () => now);
    t.note(p("/workspace", 10));
    expect(t.due()).toEqual([p("/workspace", 10)]); // the first report goes out at once
    t.note(p("/workspace", 20));
    t.note(p("/tmp", 5));
    now += 249;
    expect(t.due()).toEqual([]);
    t.note(p("/workspace", 30));
    now += 1;
    expect(t.due()).toEqual([p("/workspace", 30), p("/tmp", 5)]);
    expect(t.due()).toEqual([]); // nothing new
    t.note(p("/tmp", 9));
    expect(t.flush()).toEqual([p("/tmp", 9)]);
    expect(t.flush()).toEqual([]);
  });

  it("with interval 0 hands out every report", () => {
    const t = new ProgressThrottle(0, () => 5);
    for (const b of [1, 2, 3]) {
      t.note(p("/workspace", b));
      expect(t.due()).toEqual([p("/workspace", b)]);
    }
  });
});
