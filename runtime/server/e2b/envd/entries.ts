// File entries as the E2B SDK reads them (EntryInfo), parsed from GNU find's -printf output:
// one NUL after every field, so names with newlines or any other byte but NUL survive.
import { posix } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { type EntryInfoSchema, FileType } from "./gen/filesystem/filesystem_pb.ts";

export type Entry = MessageInitShape<typeof EntryInfoSchema>;

/** type, size, mode (octal), symbolic mode, user, group, mtime (s.frac), symlink target, path */
export const FIND_FORMAT = "%y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%l\\0%p\\0";
const FIELDS = 9;

const TYPES: Record<string, FileType> = { f: FileType.FILE, d: FileType.DIRECTORY, l: FileType.SYMLINK };

function timestamp(secondsDotFraction: string): { seconds: bigint; nanos: number } {
  const [s = "0", frac = ""] = secondsDotFraction.split(".");
  return { seconds: BigInt(s), nanos: Number(frac.padEnd(9, "0").slice(0, 9)) };
}

/** Entries of find's output; types other than file, directory and symlink are left out (as the SDK does). */
export function parseFindEntries(out: Buffer): Entry[] {
  const fields = out.toString("utf8").split("\0");
  const entries: Entry[] = [];
  for (let i = 0; i + FIELDS <= fields.length; i += FIELDS) {
    const [y, size, mode, perms, user, group, mtime, target, path] = fields.slice(i, i + FIELDS) as string[];
    const type = TYPES[y!];
    if (type === undefined) continue;
    const entry: Entry = {
      name: posix.basename(path!),
      type,
      path: path!,
      size: BigInt(size!),
      mode: Number.parseInt(mode!, 8),
      permissions: perms!,
      owner: user!,
      group: group!,
      modifiedTime: timestamp(mtime!),
    };
    if (type === FileType.SYMLINK) entry.symlinkTarget = target!;
    entries.push(entry);
  }
  return entries;
}
