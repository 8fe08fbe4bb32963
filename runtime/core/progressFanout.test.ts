import { describe, expect, it } from "vitest";
import { ProgressFanout } from "./progressFanout.ts";
import type { TransferProgress } from "./types.ts";

describe("ProgressFanout", () => {
  it("delivers a sandbox's reports of the listener's own operation to every listener until it stops listening", () => {
    const f = new ProgressFanout();
    const a: TransferProgress[] = [];
    const b: TransferProgress[] = [];
    const other: TransferProgress[] = [];
    const stopA = f.add("sbx-1", "resume", (p) => a.push(p));
    f.add("sbx-1", "resume", (p) => b.push(p));
    f.add("sbx-2", "resume", (p) => other.push(p));
    const pause: TransferProgress = { op: "pause", path: "/workspace", bytes: 5 };
    const r1: TransferProgress = { op: "resume", path: "/workspace", bytes: 1, totalBytes: 9 };
    const r2: TransferProgress = { op: "resume", path: "/workspace", bytes: 9, totalBytes: 9 };
    f.emit("sbx-1", pause); // a resume queued behind a pause does not show the pause's bytes
    f.sink("sbx-1")(r1);
    stopA();
    f.emit("sbx-1", r2);
    expect(a).toEqual([r1]);
    expect(b).toEqual([r1, r2]);
    expect(other).toEqual([]);
    expect(f.add("sbx-1", "pause", undefined)).toBeTypeOf("function"); // no listener: nothing to stop
  });
});
