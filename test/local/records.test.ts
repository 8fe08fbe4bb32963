// "Absent" means ENOENT and nothing else: a state dir the runtime cannot read must not look
// like a machine without sandboxes (recovery would forget them, or remove their directories).
// Root reads everything, so the permissions cases run the reader as an unprivileged user.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { readRecords, type SandboxRecord, slotPaths } from "../../runtime/local/records.ts";
import { tempStateDir } from "./harness.ts";

const NOBODY = 65534;
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

/** A state dir (world-traversable) holding one sandbox directory with a valid record. */
function stateWithOneRecord(): { stateDir: string; key: string } {
  const stateDir = tempStateDir();
  dirs.push(stateDir);
  fs.chmodSync(stateDir, 0o755);
  const key = "sabc123";
  const p = slotPaths(stateDir, key);
  fs.mkdirSync(p.dir, { recursive: true, mode: 0o755 });
  fs.chmodSync(path.dirname(p.dir), 0o755);
  const rec: SandboxRecord = {
    version: 1,
    key,
    uid: 1,
    image: { profile: "base", image: "host" },
    rootfs: "host",
    size: { name: "nano" } as SandboxRecord["size"],
    env: {},
  };
  fs.writeFileSync(p.record, JSON.stringify(rec), { mode: 0o644 });
  return { stateDir, key };
}

/** readRecords run as `nobody`: what it returned, or the message it threw. */
function readAsNobody(stateDir: string): { records?: { key: string; error?: string }[]; thrown?: string } {
  const fixture = path.join(import.meta.dirname, "fixtures/read-records.ts");
  const out = execFileSync(process.execPath, ["--import", "tsx", fixture, stateDir], {
    uid: NOBODY,
    gid: NOBODY,
    cwd: path.resolve(import.meta.dirname, "../.."),
    encoding: "utf8",
  });
  return JSON.parse(out);
}

describe.skipIf(process.getuid?.() !== 0)("readRecords: absent only for ENOENT", () => {
  it("reads the record when it can (the unprivileged reader itself works)", () => {
    const { stateDir, key } = stateWithOneRecord();
    expect(readAsNobody(stateDir).records).toMatchObject([{ key, record: { key, version: 1 } }]);
  });

  it("an unreadable sandboxes directory throws, naming the path and the fix, instead of 'no sandboxes'", () => {
    const { stateDir } = stateWithOneRecord();
    fs.chmodSync(path.join(stateDir, "sandboxes"), 0o700);
    const got = readAsNobody(stateDir);
    expect(got.records).toBeUndefined();
    expect(got.thrown).toContain(
      `reading the local sandbox records failed at ${path.join(stateDir, "sandboxes")}: EACCES`,
    );
    expect(got.thrown).toContain("config.local.stateDir");
    expect(got.thrown).toContain("fix the permissions");
  });

  it("an unreadable record throws instead of reading as a directory without a record", () => {
    const { stateDir, key } = stateWithOneRecord();
    fs.chmodSync(slotPaths(stateDir, key).record, 0o600);
    const got = readAsNobody(stateDir);
    expect(got.records).toBeUndefined();
    expect(got.thrown).toContain(`failed at ${slotPaths(stateDir, key).record}: EACCES`);
  });
});

describe("readRecords: what ENOENT means", () => {
  it("no sandboxes directory yet: no sandboxes", () => {
    const stateDir = tempStateDir();
    dirs.push(stateDir);
    expect(readRecords(stateDir)).toEqual([]);
  });

  it("a sandbox directory whose create never wrote a record: reported for that key, not thrown", () => {
    const stateDir = tempStateDir();
    dirs.push(stateDir);
    fs.mkdirSync(slotPaths(stateDir, "sdead").dir, { recursive: true });
    expect(readRecords(stateDir)).toEqual([{ key: "sdead", error: "no record in sdead" }]);
  });

  it("a stray file where a sandbox directory should be (ENOTDIR): reported for that key, not thrown", () => {
    const stateDir = tempStateDir();
    dirs.push(stateDir);
    fs.mkdirSync(path.join(stateDir, "sandboxes"));
    fs.writeFileSync(path.join(stateDir, "sandboxes", "stray"), "");
    expect(readRecords(stateDir)).toEqual([{ key: "stray", error: "no record in stray" }]);
  });
});
