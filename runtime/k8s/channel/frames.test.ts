import { describe, expect, it } from "vitest";
import { resultOf } from "./command.ts";
import { encodeFrame, FrameDecoder, MAX_FRAME, parseExit, parseList } from "./frames.ts";

describe("channel frames", () => {
  it("decodes frames split at any byte, and several in one chunk", () => {
    const bytes = Buffer.concat([encodeFrame("1", 7, "hello"), encodeFrame("X", 7, "exit:0"), encodeFrame("E", 9)]);
    for (let cut = 0; cut <= bytes.length; cut++) {
      const d = new FrameDecoder();
      const frames = [...d.push(bytes.subarray(0, cut)), ...d.push(bytes.subarray(cut))];
      expect(frames.map((f) => [f.type, f.stream, f.payload.toString()])).toEqual([
        ["1", 7, "hello"],
        ["X", 7, "exit:0"],
        ["E", 9, ""],
      ]);
    }
  });

  it("refuses a length past the limit instead of buffering for it", () => {
    const head = Buffer.alloc(9);
    head[0] = "1".charCodeAt(0);
    head.writeUInt32BE(MAX_FRAME + 1, 5);
    expect(() => new FrameDecoder().push(head)).toThrow(`frame of ${MAX_FRAME + 1} bytes is over the limit`);
  });

  it.each([
    ["exit:0", { exitCode: 0, timedOut: false, oomKilled: false }],
    ["exit:3", { exitCode: 3, timedOut: false, oomKilled: false }],
    ["timeout:137", { exitCode: 124, timedOut: true, oomKilled: false }],
    ["killed:137", { exitCode: 137, timedOut: false, oomKilled: false }],
    ["signal:137", { exitCode: 137, timedOut: false, oomKilled: true }],
    ["signal:143", { exitCode: 143, timedOut: false, oomKilled: false }],
  ])("%s is %o", (text, want) => expect(resultOf(parseExit(text))).toEqual(want));

  it("refuses an exit it cannot read, and parses the list", () => {
    expect(() => parseExit("exit:")).toThrow('exit frame "exit:" is not kind:code');
    expect(parseList(Buffer.from("a1\t12\trunning\t-\nb2\t13\texited\tkilled:137\n"))).toEqual([
      { id: "a1", pid: 12, state: "running" },
      { id: "b2", pid: 13, state: "exited", exit: "killed:137" },
    ]);
  });

  it("lists with a label (five fields) and without (a daemon from before labels: four)", () => {
    const payload = Buffer.from("a1\t12\trunning\t-\tbGFi\nb2\t13\texited\tkilled:137\t-\nc3\t14\trunning\t-\n");
    expect(parseList(payload)).toEqual([
      { id: "a1", pid: 12, state: "running", label: "bGFi" },
      { id: "b2", pid: 13, state: "exited", exit: "killed:137" },
      { id: "c3", pid: 14, state: "running" },
    ]);
  });
});
