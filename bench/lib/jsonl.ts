// Results as JSON lines. The file is created exclusively (an existing result is never
// overwritten) and every record is written and fsynced before the next trial starts, so an
// interrupted run leaves every finished trial on disk.
import { closeSync, fsyncSync, mkdirSync, openSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

export class JsonlWriter {
  private fd: number | undefined;
  constructor(readonly path: string) {
    try {
      this.fd = openSync(path, "wx");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EEXIST")
        throw new Error(`output ${path} already exists: results are never overwritten; pass a new --output path`);
      throw err;
    }
  }
  write(record: Record<string, unknown>): void {
    if (this.fd === undefined) throw new Error(`output ${this.path} is closed`);
    writeSync(this.fd, `${JSON.stringify(record)}\n`);
    fsyncSync(this.fd);
  }
  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/** A benchmark's results file, opened exclusively: `explicit` (--output), or a new timestamped file under $TMPDIR/sbx-bench. */
export function openResults(explicit: string | undefined, bench: string): JsonlWriter {
  const path =
    explicit ?? join(tmpdir(), "sbx-bench", `${bench}-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
  mkdirSync(dirname(path), { recursive: true });
  return new JsonlWriter(path);
}
