// A tar archive holding one regular file whose bytes stream from `data` (length known up
// front): how the benchmarks upload payloads through Manager.putArchive without holding them.
import { Readable } from "node:stream";

function field(buf: Buffer, off: number, len: number, value: number): void {
  buf.write(`${value.toString(8).padStart(len - 1, "0")}\0`, off, len, "latin1");
}

export function fileHeader(name: string, size: number, mode = 0o644, mtimeSeconds = 0): Buffer {
  if (Buffer.byteLength(name) > 100) throw new RangeError(`tar: name ${JSON.stringify(name)} is longer than 100 bytes`);
  if (size >= 8 ** 11) throw new RangeError(`tar: size ${size} needs more than 11 octal digits`);
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, "utf8");
  field(h, 100, 8, mode);
  field(h, 108, 8, 0);
  field(h, 116, 8, 0);
  field(h, 124, 12, size);
  field(h, 136, 12, mtimeSeconds);
  h.write("        ", 148, 8, "latin1");
  h.write("0", 156, 1, "latin1");
  h.write("ustar\0", 257, 6, "latin1");
  h.write("00", 263, 2, "latin1");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
  return h;
}

export function singleFileTar(name: string, size: number, data: Readable): Readable {
  async function* gen(): AsyncGenerator<Buffer> {
    yield fileHeader(name, size);
    let n = 0;
    for await (const c of data as AsyncIterable<Buffer>) {
      n += c.length;
      yield c;
    }
    if (n !== size) throw new Error(`tar: ${name} declared ${size} bytes but the stream gave ${n}`);
    const pad = (512 - (size % 512)) % 512;
    yield Buffer.alloc(pad + 1024);
  }
  return Readable.from(gen(), { objectMode: false });
}
