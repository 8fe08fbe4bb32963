// Tar upload with a byte limit enforced while streaming (fastify's bodyLimit only covers bodies
// it buffers itself): a declared Content-Length over the limit is refused before reading; an
// undeclared body is cut off at the limit and the request answered 413.
import { Transform, type Readable, type TransformCallback } from "node:stream";
import { TooLargeError } from "../core/errors.ts";

export class ByteLimit extends Transform {
  private seen = 0;
  exceeded = false;
  constructor(private readonly limit: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.limit) {
      this.exceeded = true;
      cb(new TooLargeError("body", this.limit));
      return;
    }
    cb(null, chunk);
  }
}

/** Wrap an upload in the limit; `check()` turns any failure after a trip into the 413. */
export function limitUpload(body: Readable, contentLength: string | undefined, limit: number): { stream: Readable; check: (err: unknown) => unknown } {
  if (contentLength !== undefined && Number(contentLength) > limit) throw new TooLargeError("body", limit);
  const limiter = new ByteLimit(limit);
  body.on("error", (err) => limiter.destroy(err));
  body.pipe(limiter);
  return { stream: limiter, check: (err) => (limiter.exceeded ? new TooLargeError("body", limit) : err) };
}
