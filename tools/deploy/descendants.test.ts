import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { descendantsOf, killDescendants, parentOf } from "./descendants.ts";

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("parentOf", () => {
  it.each([
    ["1234 (node) S 77 1234 1234 0 -1", 77],
    ["99 (my (odd) name) R 5 99 99 0 -1", 5],
  ])("%j", (stat, want) => {
    expect(parentOf(stat)).toBe(want);
  });
});

describe("killDescendants", () => {
  it("kills a whole tree below the root (children and grandchildren), not the root itself", async () => {
    // sh -> (sleep, sh -> sleep): a stand-in for pulumi with its provider plugin
    const root = spawn("sh", ["-c", "sleep 300 & sh -c 'sleep 300 & wait' & wait"], { stdio: "ignore" });
    root.on("error", () => undefined);
    const rootPid = root.pid as number;
    let tree: number[] = [];
    for (let i = 0; i < 100 && tree.length < 3; i++) {
      await new Promise((r) => setTimeout(r, 50));
      tree = descendantsOf(rootPid);
    }
    expect(tree.length).toBe(3);
    expect(killDescendants(rootPid).sort()).toEqual([...tree].sort());
    // the root's `wait` returns once its children die; a zombie until reaped counts as gone
    const exited = new Promise((r) => root.once("exit", r));
    await exited;
    for (let i = 0; i < 100 && tree.some(alive); i++) await new Promise((r) => setTimeout(r, 50));
    expect(tree.filter(alive)).toEqual([]);
  });
});
