// DropRootEntry against archives made by real GNU tar.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterEach, beforeEach, expect, it } from "vitest";
import { DropRootEntry } from "../../runtime/snapshot/tarFilter.ts";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "sbx-tarf-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function filtered(root: string, pieceBytes: number): Promise<Buffer> {
  const tar = execFileSync("tar", ["-C", dir, "-cf", "-", root], { maxBuffer: 1 << 26 });
  const pieces: Buffer[] = [];
  for (let i = 0; i < tar.length; i += pieceBytes) pieces.push(tar.subarray(i, i + pieceBytes));
  const out: Buffer[] = [];
  for await (const p of Readable.from(pieces).pipe(new DropRootEntry(root)) as AsyncIterable<Buffer>) out.push(p);
  return Buffer.concat(out);
}

function list(tar: Buffer): string[] {
  return execFileSync("tar", ["-tf", "-"], { input: tar }).toString().trim().split("\n").sort();
}

it.each([1, 7, 512, 100_000])(
  "drops only the root directory entry (pieces of %i bytes), long names included",
  async (piece) => {
    const long = "d".repeat(120);
    mkdirSync(join(dir, "workspace", long, "workspace"), { recursive: true });
    writeFileSync(join(dir, "workspace", long, "f".repeat(150)), "x".repeat(3000));
    writeFileSync(join(dir, "workspace", "a.txt"), "hello");
    writeFileSync(join(dir, "workspace", long, "workspace", "b"), "");
    const all = list(execFileSync("tar", ["-C", dir, "-cf", "-", "workspace"]));
    const out = await filtered("workspace", piece);
    expect(all).toContain("workspace/");
    expect(list(out)).toEqual(all.filter((n) => n !== "workspace/"));
    // unpacks to the same files
    const target = join(dir, "restore");
    mkdirSync(target);
    await new Promise<void>((resolve, reject) => {
      const t = spawn("tar", ["-C", target, "-xf", "-"]);
      t.on("close", (c) => (c === 0 ? resolve() : reject(new Error(`tar exit ${c}`))));
      t.stdin.end(out);
    });
    expect(execFileSync("sh", ["-c", `cd ${target} && find . -type f | sort | xargs sha256sum`]).toString()).toBe(
      execFileSync("sh", [
        "-c",
        `cd ${dir} && find workspace -type f | sort | sed 's|^|./|' | xargs sha256sum`,
      ]).toString(),
    );
  },
);
