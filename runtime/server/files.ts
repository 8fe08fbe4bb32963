// Tar upload with a byte limit enforced while streaming (fastify's bodyLimit only covers bodies
// it buffers itself): a declared Content-Length over the limit is refused before reading; an
// undeclared body is cut off at the limit and the request answered 413. Tar download whose
// failure is never mistaken for success (sendArchive).
import { pipeline, type Readable, Transform, type TransformCallback } from "node:stream";
import type { FastifyReply } from "fastify";
import { TooLargeError } from "../core/errors.ts";
import { HeldTail } from "../core/heldTail.ts";

/** Trailer sent after a complete archive, and only then. */
export const ARCHIVE_TRAILER = "sbx-archive";

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
export function limitUpload(
  body: Readable,
  contentLength: string | undefined,
  limit: number,
): { stream: Readable; check: (err: unknown) => unknown } {
  if (contentLength !== undefined && Number(contentLength) > limit) throw new TooLargeError("body", limit);
  const limiter = new ByteLimit(limit);
  body.on("error", (err) => limiter.destroy(err));
  body.pipe(limiter);
  return { stream: limiter, check: (err) => (limiter.exceeded ? new TooLargeError("body", limit) : err) };
}

/**
 * Sends a download. The backend's archive stream errors when tar fails or its exec breaks;
 * what the client sees then:
 * - before the first byte (a small archive is held whole, see HeldTail): our JSON error, 502;
 * - later: the response is cut (no terminating chunk, fastify destroys the socket), and the
 *   bytes sent lack the archive's end marker, so `curl` reports a transfer error (exit 18),
 *   `tar -x` reports an unexpected end, and our client throws.
 * A complete archive ends with the trailer `sbx-archive: complete`, for clients that read
 * trailers. A client that goes away destroys the chain, which stops tar in the sandbox.
 */
export function sendArchive(reply: FastifyReply, tar: Readable): FastifyReply {
  // Node's own trailers, declared with the first byte, not reply.trailer() nor an up-front
  // header: either makes an error before the first byte (our JSON, with a Content-Length) an
  // invalid response. They need chunked encoding, which Node uses for HTTP/1.1 only: an
  // HTTP/1.0 client gets no trailer, and a cut connection without the end marker on failure.
  const req = reply.request.raw;
  const chunked = req.httpVersionMajor === 1 && req.httpVersionMinor >= 1;
  const held = new HeldTail({
    onFirstBytes: () => chunked && reply.raw.setHeader("trailer", ARCHIVE_TRAILER),
    onComplete: () => chunked && reply.raw.addTrailers({ [ARCHIVE_TRAILER]: "complete" }),
  });
  // the error reaches fastify through `held`; this callback only keeps pipeline from throwing
  pipeline(tar, held, () => undefined);
  return reply.type("application/x-tar").send(held);
}
