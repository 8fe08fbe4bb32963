// What the local backend writes to disk about each sandbox, so a restarted process can find
// what the previous one left: <stateDir>/sandboxes/<key>/record.json, next to the sandbox's
// workspace, the helper's socket directory and the helper's log.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
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
  return "s" + crypto.randomBytes(6).toString("hex");
}

/** Atomic (write then rename), so a crash never leaves half a record. */
export async function writeRecord(p: SlotPaths, rec: SandboxRecord): Promise<void> {
  const tmp = `${p.record}.${crypto.randomBytes(4).toString("hex")}.tmp`;
  await fs.promises.mkdir(p.dir, { recursive: true, mode: 0o711 });
  await fs.promises.writeFile(tmp, JSON.stringify(rec));
  await fs.promises.rename(tmp, p.record);
}

/** The same, synchronously: for state changes that must be on disk before anyone hears of them. */
export function writeRecordSync(p: SlotPaths, rec: SandboxRecord): void {
  const tmp = `${p.record}.${crypto.randomBytes(4).toString("hex")}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(rec));
  fs.renameSync(tmp, p.record);
}

export function readRecords(stateDir: string): { key: string; record?: SandboxRecord; error?: string }[] {
  const root = path.join(stateDir, "sandboxes");
  let names: string[] = [];
  try {
    names = fs.readdirSync(root);
  } catch {
    return [];
  }
  return names.map((key) => {
    try {
      const record = JSON.parse(fs.readFileSync(slotPaths(stateDir, key).record, "utf8")) as SandboxRecord;
      if (record.version !== 1 || record.key !== key) return { key, error: `unexpected record version or key in ${key}` };
      return { key, record };
    } catch (err) {
      return { key, error: (err as Error).message };
    }
  });
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
  return "sbx-" + crypto.createHash("sha256").update(path.resolve(stateDir)).digest("hex").slice(0, 12);
}
