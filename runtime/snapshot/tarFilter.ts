// Streams a tar archive through, dropping the entry of the archived directory itself
// ("workspace/", "tmp/"). Restoring that entry would set the owner, mode and times of a mount
// point the sandbox does not own (tar: Cannot utime: Operation not permitted); its contents are
// all that a snapshot needs. Constant memory: only headers (and GNU/pax extended headers,
// capped) are held, file data passes straight through.
import { Transform, type TransformCallback } from "node:stream";
import { UpstreamError } from "../core/errors.ts";

const BLOCK = 512;
const MAX_EXTENDED = 1 << 20;

function octal(buf: Buffer, off: number, len: number): number {
  if (buf[off] & 0x80) {
    // base-256 (GNU) for large sizes
    let v = 0;
    for (let i = off + 1; i < off + len; i++) v = v * 256 + buf[i];
    return v;
  }
  const s = buf
    .toString("latin1", off, off + len)
    .replace(/\0.*$/s, "")
    .trim();
  return s ? parseInt(s, 8) : 0;
}

function cstr(buf: Buffer, off: number, len: number): string {
  const end = buf.indexOf(0, off);
  return buf.toString("utf8", off, end < 0 || end > off + len ? off + len : end);
}

export class DropRootEntry extends Transform {
  private header = Buffer.alloc(0);
  /** bytes of the current entry's data (with padding) still to pass or collect */
  private dataLeft = 0;
  private mode: "pass" | "hold" | "discard" = "pass";
  /** a held extended header may rename the next entry: never drop that one */
  private pendingRenames = false;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private done = false;
  /** entries passed through (the dropped root and extended headers not counted) */
  entries = 0;

  constructor(private readonly root: string) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    try {
      let at = 0;
      while (at < chunk.length) {
        if (this.done) {
          this.push(chunk.subarray(at));
          break;
        }
        if (this.dataLeft > 0) {
          const n = Math.min(this.dataLeft, chunk.length - at);
          const part = chunk.subarray(at, at + n);
          if (this.mode === "hold") this.hold(part);
          else if (this.mode === "pass") this.push(part);
          this.dataLeft -= n;
          at += n;
          continue;
        }
        const need = BLOCK - this.header.length;
        const take = chunk.subarray(at, at + need);
        this.header = this.header.length ? Buffer.concat([this.header, take]) : Buffer.from(take);
        at += take.length;
        if (this.header.length === BLOCK) this.onHeader();
      }
      cb();
    } catch (err) {
      cb(err as Error);
    }
  }

  override _flush(cb: TransformCallback): void {
    for (const p of this.pending) this.push(p);
    if (this.header.length) this.push(this.header);
    cb();
  }

  private hold(b: Buffer): void {
    this.pendingBytes += b.length;
    if (this.pendingBytes > MAX_EXTENDED)
      throw new UpstreamError(
        `tar archive of ${this.root}: extended headers larger than ${MAX_EXTENDED} bytes; the archive is not a plain tar stream`,
      );
    this.pending.push(Buffer.from(b));
  }

  private onHeader(): void {
    const h = this.header;
    this.header = Buffer.alloc(0);
    if (h.every((b) => b === 0)) {
      this.flushPending();
      this.push(h);
      this.done = true;
      return;
    }
    const type = String.fromCharCode(h[156] || 0x30);
    const size = octal(h, 124, 12);
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (type === "x" || type === "L" || type === "K") {
      // belongs to the next entry: hold it until we know whether that entry is dropped
      this.hold(h);
      this.pendingRenames = true;
      this.dataLeft = padded;
      this.mode = "hold";
      return;
    }
    const prefix = h.toString("latin1", 257, 263).startsWith("ustar") ? cstr(h, 345, 155) : "";
    const name = (prefix ? `${prefix}/` : "") + cstr(h, 0, 100);
    const isRoot = type === "5" && !this.pendingRenames && name.replace(/^\.\//, "").replace(/\/+$/, "") === this.root;
    if (isRoot) {
      this.pending = [];
      this.pendingBytes = 0;
      this.dataLeft = padded;
      this.mode = "discard";
      return;
    }
    this.flushPending();
    this.push(h);
    this.entries++;
    this.dataLeft = padded;
    this.mode = "pass";
  }

  private flushPending(): void {
    for (const p of this.pending) this.push(p);
    this.pending = [];
    this.pendingBytes = 0;
    this.pendingRenames = false;
  }
}
