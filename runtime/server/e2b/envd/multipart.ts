// A streaming multipart/form-data reader for uploads: each part's body streams out as it
// arrives (a 1 GiB file is never held whole), with backpressure: the request is read only as
// fast as the current part's consumer takes it. Parts come one after another, in order.
import { PassThrough, Writable } from "node:stream";
import { ValidationError } from "../../../core/errors.ts";

export interface FormPart {
  name: string;
  /** the filename as the client sent it, WHATWG escapes (%22, %0A, %0D) undone */
  filename?: string;
  body: PassThrough;
}

const MAX_HEADER_BYTES = 16 * 1024;
const CRLF = Buffer.from("\r\n");
const HEADER_END = Buffer.from("\r\n\r\n");

/** The boundary of a multipart/form-data content type, or a ValidationError naming the header. */
export function boundaryOf(contentType: string): string {
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const b = m?.[1] ?? m?.[2];
  if (!b || b.length > 200)
    throw new ValidationError("content-type", contentType, "send multipart/form-data with a boundary parameter");
  return b;
}

function unescapeFormValue(v: string): string {
  return v.replace(/%22/g, '"').replace(/%0A/gi, "\n").replace(/%0D/gi, "\r");
}

/** name and filename from a part's headers (Content-Disposition, including RFC 5987 filename*). */
export function dispositionOf(headerBlock: string): { name: string; filename?: string } {
  const line = headerBlock.split("\r\n").find((l) => /^content-disposition:/i.test(l));
  if (!line) throw new ValidationError("multipart part", headerBlock, "each part needs a Content-Disposition header");
  const param = (key: string) => new RegExp(`;\\s*${key}="((?:[^"\\\\]|\\\\.)*)"`, "i").exec(line)?.[1];
  const extended = /;\s*filename\*=([^']*)'[^']*'([^;\s]+)/i.exec(line);
  const name = param("name");
  if (name === undefined) throw new ValidationError("multipart part", line, 'name the part: form-data; name="file"');
  const raw = param("filename");
  const filename = extended ? decodeURIComponent(extended[2]!) : raw === undefined ? undefined : unescapeFormValue(raw);
  return { name: unescapeFormValue(name), filename };
}

/**
 * Write the request body into it; `onPart` is called for every part, whose body it must
 * consume (the reader waits for it). Finishes after the closing delimiter; a body that ends
 * before it, or malformed framing, fails with a ValidationError.
 */
export class MultipartReader extends Writable {
  private buf: Buffer = Buffer.alloc(0);
  private state: "preamble" | "headers" | "body" | "done" = "preamble";
  private part?: FormPart;
  private readonly delimiter: Buffer;

  constructor(
    boundary: string,
    private readonly onPart: (p: FormPart) => void,
  ) {
    super();
    this.delimiter = Buffer.from(`\r\n--${boundary}`);
    // the first delimiter may open the body without a CRLF before it
    this.buf = Buffer.from("\r\n");
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    try {
      this.advance(cb);
    } catch (err) {
      cb(err as Error);
    }
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.state === "done") {
      cb();
      return;
    }
    const err = new ValidationError("body", "(truncated)", "the multipart body ended before its closing boundary");
    this.part?.body.destroy(err);
    cb(err);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (err) this.part?.body.destroy(err);
    cb(err);
  }

  /** consume as much of buf as the state allows; cb once the current part accepted its bytes */
  // Over 60 lines on purpose: the parser's state machine in one loop; split, its states would be spread over methods.
  private advance(cb: (err?: Error | null) => void): void {
    for (;;) {
      if (this.state === "done") {
        this.buf = Buffer.alloc(0); // the epilogue is ignored
        cb();
        return;
      }
      if (this.state === "preamble" || this.state === "headers") {
        if (this.state === "preamble") {
          const at = this.buf.indexOf(this.delimiter);
          if (at < 0) {
            if (this.buf.length > MAX_HEADER_BYTES) throw this.bad("no opening boundary");
            cb();
            return;
          }
          if (this.buf.length < at + this.delimiter.length + 2) {
            cb();
            return;
          }
          const after = this.buf.subarray(at + this.delimiter.length, at + this.delimiter.length + 2).toString();
          if (after === "--") {
            this.state = "done";
            continue;
          }
          this.buf = this.buf.subarray(at + this.delimiter.length);
          this.state = "headers";
        }
        const end = this.buf.indexOf(HEADER_END);
        if (end < 0) {
          if (this.buf.length > MAX_HEADER_BYTES) throw this.bad("part headers over 16 KiB");
          cb();
          return;
        }
        // the block starts with the CRLF that ended the delimiter line
        const block = this.buf.subarray(CRLF.length, end).toString("utf8");
        this.buf = this.buf.subarray(end + HEADER_END.length);
        const body = new PassThrough();
        // a broken upload destroys the part with the cause; its consumer reads body.errored, and
        // it may not have attached its own listener yet
        body.on("error", () => undefined);
        this.part = { ...dispositionOf(block), body };
        this.state = "body";
        this.onPart(this.part);
      }
      // body: everything up to the next delimiter is the part's
      const at = this.buf.indexOf(this.delimiter);
      const part = this.part!;
      if (at < 0) {
        const keep = this.delimiter.length - 1;
        if (this.buf.length <= keep) {
          cb();
          return;
        }
        const out = this.buf.subarray(0, this.buf.length - keep);
        this.buf = this.buf.subarray(this.buf.length - keep);
        this.send(part, out, cb);
        return;
      }
      const out = this.buf.subarray(0, at);
      this.buf = this.buf.subarray(at);
      this.part = undefined;
      this.state = "preamble";
      if (out.length > 0) part.body.write(out);
      part.body.end();
    }
  }

  private send(part: FormPart, bytes: Buffer, cb: (err?: Error | null) => void): void {
    if (part.body.write(bytes)) {
      cb();
      return;
    }
    // a consumer that failed destroys the part: stop waiting for it (the request fails there)
    let called = false;
    const go = () => {
      if (called) return;
      called = true;
      part.body.off("drain", go);
      part.body.off("close", go);
      cb(part.body.destroyed ? (part.body.errored ?? new Error("upload consumer went away")) : null);
    };
    part.body.once("drain", go);
    part.body.once("close", go);
  }

  private bad(why: string): ValidationError {
    return new ValidationError("body", "(multipart)", `malformed multipart/form-data: ${why}`);
  }
}
