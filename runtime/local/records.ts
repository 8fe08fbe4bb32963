// What the local backend writes to disk about each sandbox, so a restarted process can find
// what the previous one left: <stateDir>/sandboxes/<key>/record.json, next to the sandbox's
// workspace, the helper's socket directory and the helper's log.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Logger } from "../core/log.ts";
import type { ImageRef, Sandbox, SizeClass } from "../core/types.ts";

export interface SandboxRecord {
  version: 1;
  /** internal name of the slot (directories, cgroups); stable across a warm claim */
  key: string;
  uid: number;
  image: ImageRef;
  /** "host" or the unpacked rootfs path */
  rootfs: string;
  size: SizeClass;
  helperPid?: number;
  /** absent while the slot sits unclaimed in the warm pool */
  sandbox?: Sandbox;
  env: Record<string, string>;
}

export interface SlotPaths {
  dir: string;
  /** ext4 image mounted on /workspace inside the sandbox */
  workspaceImage: string;
  run: string;
  socket: string;
  log: string;
  record: string;
}

export function slotPaths(stateDir: string, key: string): SlotPaths {
  const dir = path.join(stateDir, "sandboxes", key);
  return {
    dir,
    workspaceImage: path.join(dir, "workspace.img"),
    run: path.join(dir, "run"),
    socket: path.join(dir, "run", "helper.sock"),
    log: path.join(dir, "init.log"),
    record: path.join(dir, "record.json"),
  };
}

export function newSlotKey(): string {
  return `s${crypto.randomBytes(6).toString("hex")}`;
}

/** Atomic (write then rename), so a crash never leaves half a record. */
export async function writeRecord(p: SlotPaths, rec: SandboxRecord): Promise<void> {
  const tmp = `${p.record}.${crypto.randomBytes(4).toString("hex")}.tmp`;
  await fs.promises.mkdir(p.dir, { recursive: true, mode: 0o711 });
  await fs.promises.writeFile(tmp, JSON.stringify(rec));
  await fs.promises.rename(tmp, p.record);
}

/**
 * writeRecord for writes whose failure must not stop the caller (the sandbox already changed
 * state; the record is how a restart learns it). Never rejects: a failure is logged with the
 * sandbox id, because a restart will then find the record as it was before.
 */
export async function writeRecordOrLog(p: SlotPaths, rec: SandboxRecord, logger: Logger, why: string): Promise<void> {
  try {
    await writeRecord(p, rec);
  } catch (err) {
    logRecordFailure(rec, logger, why, err);
  }
}

function logRecordFailure(rec: SandboxRecord, logger: Logger, why: string, err: unknown): void {
  logger.error(
    { sandbox: rec.sandbox?.id, slot: rec.key, op: "record", phase: rec.sandbox?.phase, err: (err as Error).message },
    `writing the sandbox record (${why}) failed; after a restart the sandbox shows its previous state`,
  );
}

/** writeRecordOrLog, synchronously (see writeRecordSync). */
export function writeRecordSyncOrLog(p: SlotPaths, rec: SandboxRecord, logger: Logger, why: string): void {
  try {
    writeRecordSync(p, rec);
  } catch (err) {
    logRecordFailure(rec, logger, why, err);
  }
}

/** The same, synchronously: for state changes that must be on disk before anyone hears of them. */
export function writeRecordSync(p: SlotPaths, rec: SandboxRecord): void {
  const tmp = `${p.record}.${crypto.randomBytes(4).toString("hex")}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(rec));
  fs.renameSync(tmp, p.record);
}

/**
 * Every sandbox directory with its record, or why it has none. Only a path that does not exist
 * (ENOENT; ENOTDIR for a stray file where a directory should be) means "absent": no sandboxes
 * yet, or a directory whose create never wrote a record. Any other error reading the
 * directory or a record (EACCES, EIO...) throws: read as "no sandboxes", recovery would forget
 * or remove live sandboxes. A record that is there but is not a record is reported per key.
 */
export function readRecords(
  stateDir: string,
  logger?: Logger,
): { key: string; record?: SandboxRecord; error?: string }[] {
  const root = path.join(stateDir, "sandboxes");
  const names = readOrAbsent(root, () => fs.readdirSync(root), logger);
  if (names === undefined) return [];
  return names.map((key) => {
    const file = slotPaths(stateDir, key).record;
    const text = readOrAbsent(file, () => fs.readFileSync(file, "utf8"), logger);
    if (text === undefined) return { key, error: `no record in ${key}` };
    try {
      const record = JSON.parse(text) as SandboxRecord;
      if (record.version !== 1 || record.key !== key)
        return { key, error: `unexpected record version or key in ${key}` };
      return { key, record };
    } catch (err) {
      return { key, error: (err as Error).message };
    }
  });
}

const ABSENT = new Set(["ENOENT", "ENOTDIR"]);

/** `read()`, or undefined when `target` does not exist; any other failure is logged and thrown, naming the path and the fix. */
function readOrAbsent<T>(target: string, read: () => T, logger?: Logger): T | undefined {
  try {
    return read();
  } catch (err) {
    if (ABSENT.has((err as NodeJS.ErrnoException).code ?? "")) return undefined;
    logger?.error(
      { op: "recover", path: target, err },
      "cannot read the local sandbox records; not starting rather than forgetting sandboxes",
    );
    throw new Error(
      `reading the local sandbox records failed at ${target}: ${(err as Error).message}; the runtime must be able to read its state dir (config.local.stateDir): fix the permissions, or move the unreadable entry away, and start again`,
      { cause: err },
    );
  }
}

/**
 * Unprivileged uids for sandboxes: a block of 65536 per state directory (so two backends on one
 * machine, e.g. parallel test suites, do not share uids), far above ordinary and subuid ranges,
 * below 2^31 for software that treats uids as signed.
 */
export function uidBlockBase(stateDir: string): number {
  const h = crypto.createHash("sha256").update(path.resolve(stateDir)).digest().readUInt32BE(0);
  return 100_000_000 + (h % 16_000) * 65_536;
}

/** Name of this backend's cgroup root, derived from the state dir so restarts find it again. */
export function cgroupRootName(stateDir: string): string {
  return `sbx-${crypto.createHash("sha256").update(path.resolve(stateDir)).digest("hex").slice(0, 12)}`;
}
