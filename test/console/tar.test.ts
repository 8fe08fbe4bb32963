// The console's tar (console/src/tar.ts) against GNU tar: what the browser uploads unpacks to the
// same name and bytes, and what the service sends back (GNU tar's output) is read correctly.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { firstFile, tarFile } from "../../console/src/tar.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-console-tar-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const NAMES = [
  "hello.txt",
  "<img src=x onerror=window.__xss=1>",
  "ünïcødé ☃.txt",
  `${"long-".repeat(30)}name.bin`,
  "spaces and 'quotes\".txt",
];

describe("console tar", () => {
  it.each(NAMES)("%s: GNU tar unpacks our archive to the same name and bytes", (name) => {
    const data = new TextEncoder().encode(`contents of ${name}\n`);
    const archive = join(dir, "up.tar");
    writeFileSync(archive, tarFile(name, data, 1_700_000_000));
    const out = mkdtempSync(join(dir, "x-"));
    execFileSync("tar", ["-xf", archive, "-C", out]);
    expect(readFileSync(join(out, name), "utf8")).toBe(`contents of ${name}\n`);
  });

  it.each(NAMES)("%s: we read GNU tar's archive (pax and gnu formats) back", (name) => {
    const src = mkdtempSync(join(dir, "s-"));
    writeFileSync(join(src, name), Buffer.alloc(1500, 7));
    for (const format of ["pax", "gnu"]) {
      const tar = execFileSync("tar", [`--format=${format}`, "-cf", "-", "-C", src, name]);
      const f = firstFile(new Uint8Array(tar));
      expect(f?.name).toBe(name);
      expect(Buffer.from(f!.data).equals(Buffer.alloc(1500, 7))).toBe(true);
    }
  });

  it.each(["", "a/b", ".", ".."])("refuses %j as a file name", (name) => {
    expect(() => tarFile(name, new Uint8Array(), 0)).toThrow("use a plain file name without '/'");
  });
});
