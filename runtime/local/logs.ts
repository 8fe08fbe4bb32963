// The sandbox's log is its helper's stdout/stderr, appended to <slot>/init.log.
import fs from "node:fs";
import { Readable } from "node:stream";

export async function readTail(file: string, tailLines?: number): Promise<string> {
  let text = "";
  try {
    text = await fs.promises.readFile(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  if (tailLines === undefined) return text;
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines
    .slice(-tailLines)
    .map((l) => `${l}\n`)
    .join("");
}

/** Streams the file from its tail, then what is appended, until `finished()` says the sandbox is gone. */
export function followFile(
  file: string,
  tailLines: number | undefined,
  finished: () => boolean,
  pollMs = 200,
): Readable {
  let offset = 0;
  let started = false;
  let stopped = false;
  const out = new Readable({
    read() {},
    destroy(err, cb) {
      stopped = true;
      cb(err);
    },
  });
  const tick = async () => {
    if (stopped) return;
    try {
      if (!started) {
        started = true;
        out.push(await readTail(file, tailLines));
        offset = (await fs.promises.stat(file).catch(() => ({ size: 0 }))).size;
      } else {
        const fh = await fs.promises.open(file, "r").catch(() => undefined);
        if (fh) {
          try {
            const { size } = await fh.stat();
            if (size > offset) {
              const buf = Buffer.alloc(size - offset);
              await fh.read(buf, 0, buf.length, offset);
              offset = size;
              out.push(buf);
            }
          } finally {
            await fh.close();
          }
        }
      }
      if (finished()) {
        out.push(null);
        return;
      }
      setTimeout(() => void tick(), pollMs).unref();
    } catch (err) {
      out.destroy(err as Error);
    }
  };
  void tick();
  return out;
}
