// The size rule of CONTRIBUTING ("about 60 lines per function, or a reason in its header") as a
// test: every function over 60 lines in shipped code carries a reason (tools/long-functions.ts).
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { longFunctions } from "./long-functions.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

describe("functions over 60 lines in shipped code", () => {
  it("each has a reason in its header (split it into named pieces, or say why it is long)", () => {
    const unexplained = longFunctions(ROOT)
      .filter((l) => !l.reason)
      .map((l) => `${l.file.slice(ROOT.length)} ${l.name} (${l.lines} lines)`);
    expect(unexplained).toEqual([]);
  });
});
