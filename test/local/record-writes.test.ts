// Record writes whose failure must not stop the caller are logged with the sandbox id (issue 11:
// the local backend's failed-record writes used to be dropped without a line).
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type SandboxRecord, slotPaths, writeRecordOrLog, writeRecordSyncOrLog } from "../../runtime/local/records.ts";
import { captureLogger, LEVEL } from "../support/logs.ts";

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "sbx-record-writes-"));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const rec = (): SandboxRecord => ({
  version: 1,
  key: "s0123456789ab",
  uid: 100_000_000,
  image: { profile: "base", image: "host" },
  rootfs: "host",
  size: {} as never,
  env: {},
  sandbox: {
    id: "sbx-rec1",
    owner: "alice",
    profile: "base",
    size: "nano",
    phase: "Failed",
    reason: "OOMKilled",
    ready: false,
    createdAt: "",
    expiresAt: "",
    metadata: {},
    cpuRequestMillis: 0,
    memoryRequestBytes: 0,
  },
});

const failureLine = (why: string) =>
  expect.objectContaining({
    level: LEVEL.error,
    sandbox: "sbx-rec1",
    slot: "s0123456789ab",
    phase: "Failed",
    err: expect.stringMatching(/ENOTDIR|EEXIST|ENOENT/),
    msg: `writing the sandbox record (${why}) failed; after a restart the sandbox shows its previous state`,
  });

describe("writeRecordOrLog / writeRecordSyncOrLog", () => {
  it("write the record, logging nothing", async () => {
    const { logger, lines } = captureLogger();
    const p = slotPaths(root, "s0123456789ab");
    await writeRecordOrLog(p, rec(), logger, "failed: OOMKilled");
    expect(JSON.parse(await readFile(p.record, "utf8")).sandbox.phase).toBe("Failed");
    writeRecordSyncOrLog(p, rec(), logger, "ready");
    expect(lines).toEqual([]);
  });

  it("a write that fails does not throw: it is logged as an error naming the sandbox and what was lost", async () => {
    // a regular file where the state directory should be: ENOTDIR, for root too
    await writeFile(join(root, "sandboxes"), "not a directory");
    const { logger, lines } = captureLogger();
    const p = slotPaths(root, "s0123456789ab");
    await expect(writeRecordOrLog(p, rec(), logger, "failed: OOMKilled")).resolves.toBeUndefined();
    expect(() => writeRecordSyncOrLog(p, rec(), logger, "ready")).not.toThrow();
    expect(lines).toEqual([failureLine("failed: OOMKilled"), failureLine("ready")]);
  });
});
