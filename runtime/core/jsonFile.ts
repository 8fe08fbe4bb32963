// Small JSON files on local disk, shared by the file-backed stores (snapshot records,
// auto-pause status). Lives in core so that neither store has to import the other.
import { mkdir, open, readFile, rename } from "node:fs/promises";

/**
 * The JSON in `file`, or undefined when there is no such file. Only ENOENT means "absent":
 * a permissions or I/O error propagates, so a store never reads an unreadable file as empty.
 */
export async function readJsonIfExists<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, "utf8")) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** Replace `file` (inside `dir`) with `value` as JSON: temp file, fsync, rename, fsync the directory. */
export async function writeJsonAtomic(dir: string, file: string, value: unknown): Promise<void> {
  await mkdir(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  const fh = await open(tmp, "w");
  try {
    await fh.writeFile(JSON.stringify(value, null, 1));
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  const d = await open(dir, "r");
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
