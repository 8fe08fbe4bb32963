import { describe, expect, it } from "vitest";
import { decodeProcessLabel, encodeProcessLabel, LABEL_MAX_CHARS } from "./label.ts";

describe("process labels", () => {
  it("round-trips what List returns, and only in base64url", () => {
    const spec = {
      cmd: "/bin/bash",
      args: ["-l", "-c", "echo 'hi'\tthere\n"],
      envs: { K: "v=1" },
      cwd: "/tmp",
      tag: "t",
    };
    const label = encodeProcessLabel(spec, true);
    expect(label).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeProcessLabel(label)).toEqual({ spec, stdin: true });
    expect(decodeProcessLabel(encodeProcessLabel({ cmd: "x", args: [], envs: {} }, false))).toEqual({
      spec: { cmd: "x", args: [], envs: {} },
      stdin: false,
    });
  });

  it("carries a pty's window, so another replica knows the process as a terminal", () => {
    const spec = { cmd: "/bin/bash", args: ["-i", "-l"], envs: {}, pty: { cols: 80, rows: 24 } };
    expect(decodeProcessLabel(encodeProcessLabel(spec, true))).toEqual({ spec, stdin: true });
    const huge = { ...spec, cmd: "c".repeat(9000) }; // cut down to the command: still a pty
    expect(decodeProcessLabel(encodeProcessLabel(huge, true))?.spec.pty).toEqual({ cols: 80, rows: 24 });
  });

  it.each([
    ["big envs are left out first", { E: "e".repeat(9000) }, ["small"], { envs: {}, args: ["small"] }],
    ["then big args", {}, ["a".repeat(9000)], { envs: {}, args: [] }],
  ])("stays within the daemon's bound: %s", (_name, envs, args, kept) => {
    const label = encodeProcessLabel({ cmd: "/bin/sh", args, envs, tag: "t" }, false);
    expect(label.length).toBeLessThanOrEqual(LABEL_MAX_CHARS);
    expect(decodeProcessLabel(label)).toEqual({ spec: { cmd: "/bin/sh", tag: "t", ...kept }, stdin: false, cut: true });
  });

  it.each([
    ["not base64 JSON", "!!!"],
    ["another writer's label", Buffer.from(JSON.stringify({ hello: 1 })).toString("base64url")],
    [
      "a wrong type",
      Buffer.from(JSON.stringify({ v: 1, cmd: "x", args: [1], envs: {}, stdin: true })).toString("base64url"),
    ],
  ])("reads %s as no label", (_name, label) => {
    expect(decodeProcessLabel(label)).toBeUndefined();
  });
});
