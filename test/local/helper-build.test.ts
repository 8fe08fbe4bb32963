// The helper's build stamp: a machine that built an older helper (or one from other sources)
// rebuilds it when any of its sources or the build script changed, and only then.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HELPER_STAMP_INPUTS, helperSourceDigest } from "../../runtime/local/helperBinary.ts";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
let root: string;

/** Runs the build script of the copy; returns what it printed on stderr ("sbx: built ..." when it built). */
function build(): string {
  const r = spawnSync("bash", [path.join(root, "scripts/build-local-helper.sh")], {
    encoding: "utf8",
    timeout: 120_000,
  });
  if (r.status !== 0) throw new Error(`build failed: ${r.stderr}`);
  return r.stderr;
}
const stamp = () => fs.readFileSync(path.join(root, ".cache/local/sbx-helper.sha256"), "utf8").trim();

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "sbx-helper-build-"));
  for (const rel of HELPER_STAMP_INPUTS) {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.copyFileSync(path.join(repo, rel), path.join(root, rel));
  }
});
afterAll(() => {
  if (root) fs.rmSync(root, { recursive: true, force: true });
});

describe("scripts/build-local-helper.sh", () => {
  it("stamps the build with the digest the backend checks, and does not rebuild a current helper", () => {
    expect(build()).toMatch(/sbx: built/);
    expect(stamp()).toBe(helperSourceDigest(root));
    expect(build()).toBe("");
  }, 180_000);

  it.each(HELPER_STAMP_INPUTS)(
    "rebuilds when %s changed",
    (rel) => {
      fs.appendFileSync(path.join(root, rel), rel.endsWith(".sh") ? "\n# changed\n" : "\n// changed\n");
      const before = stamp();
      expect(build()).toMatch(/sbx: built/);
      expect(stamp()).not.toBe(before);
      expect(stamp()).toBe(helperSourceDigest(root));
    },
    180_000,
  );

  it("rebuilds a helper stamped by the old script (sha256 of sbx-helper.c alone)", () => {
    const oldStamp = crypto
      .createHash("sha256")
      .update(fs.readFileSync(path.join(root, "tools/local-helper/sbx-helper.c")))
      .digest("hex");
    fs.writeFileSync(path.join(root, ".cache/local/sbx-helper.sha256"), `${oldStamp}\n`);
    expect(build()).toMatch(/sbx: built/);
    expect(stamp()).toBe(helperSourceDigest(root));
  }, 180_000);
});
