// How the local backend tells "the helper could not fork for this command" from other lost
// connections: the sandbox's pids controller files, read from a directory laid out as the
// kernel does (v1 and v2), and the decision made from two readings.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type CgroupLayout, type PidsState, readPids, shouldBlamePidsLimit } from "../../runtime/local/cgroups.ts";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sbx-pids-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function fakeSandbox(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(tmp, "key-"));
  for (const [f, v] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    fs.writeFileSync(path.join(dir, f), v);
  }
  return dir;
}

describe("readPids", () => {
  it("v1: counts refused forks in the sandbox and in its init (where kernel 6.x counts a relay's)", () => {
    const dir = fakeSandbox({
      "pids.max": "128\n",
      "pids.current": "127\n",
      "pids.events": "max 2\n",
      "init/pids.events": "max 5\n",
    });
    const layout: CgroupLayout = { version: 1, mounts: {}, rootName: "r" };
    expect(readPids(layout, { pids: dir, memory: "/nope", cpu: "/nope" })).toEqual({
      max: 128,
      current: 127,
      refused: 7,
    });
  });
  it("v2: an unlimited sandbox and missing files read as no limit, nothing refused", () => {
    const dir = fakeSandbox({ "pids.max": "max\n" });
    const layout: CgroupLayout = { version: 2, mounts: {}, rootName: "r" };
    expect(readPids(layout, { unified: dir })).toEqual({ max: Infinity, current: 0, refused: 0 });
  });
});

describe("shouldBlamePidsLimit", () => {
  const s = (current: number, refused: number, max = 128): PidsState => ({ max, current, refused });
  it.each([
    ["a fork was refused meanwhile", s(60, 3), s(40, 4), true],
    ["at the limit now", s(10, 0), s(127, 0), true],
    ["one below: a relay and its command need two", s(10, 0), s(126, 0), false],
    ["room and nothing refused: another cause", s(10, 0), s(12, 0), false],
    ["no limit", s(10, 0, Infinity), s(500, 0, Infinity), false],
  ])("%s", (_name, before, after, blame) => {
    expect(shouldBlamePidsLimit(before, after)).toBe(blame);
  });
});
