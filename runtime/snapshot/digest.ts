// Content digests for OCI blobs: sha256 computed while bytes stream past, never over a
// buffered copy of the whole blob.
import { createHash, type Hash } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { UpstreamError } from "../core/errors.ts";

const DIGEST_RE = /^sha256:[a-f0-9]{64}$/;

export function isDigest(s: string): boolean {
  return DIGEST_RE.test(s);
}

export function sha256Digest(data: Uint8Array | string): string {
  return `sha256:${createHash("sha256").update(data).digest("hex")}`;
}

export class DigestMismatchError extends UpstreamError {
  constructor(what: string, expected: { digest: string; size?: number }, got: { digest: string; size: number }) {
    super(
      `${what}: content does not match its digest (expected ${expected.digest}${expected.size !== undefined ? `, ${expected.size} bytes` : ""}; ` +
        `received ${got.digest}, ${got.size} bytes): the data was discarded; the registry copy is corrupt or was replaced, retry or restore from another snapshot`,
      { expected, got },
    );
  }
}

/** Passes bytes through, and fails at the end when their sha256 or size is not the expected one. */
export class VerifyingStream extends Transform {
  private readonly hash: Hash = createHash("sha256");
  private bytes = 0;
  constructor(
    private readonly what: string,
    private readonly expected: { digest: string; size?: number },
    private readonly onProgress?: (bytes: number) => void,
  ) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    this.onProgress?.(this.bytes);
    if (this.expected.size !== undefined && this.bytes > this.expected.size) {
      cb(new DigestMismatchError(this.what, this.expected, { digest: "(longer than expected)", size: this.bytes }));
      return;
    }
    cb(null, chunk);
  }
  override _flush(cb: TransformCallback): void {
    const digest = `sha256:${this.hash.digest("hex")}`;
    if (digest !== this.expected.digest || (this.expected.size !== undefined && this.bytes !== this.expected.size)) {
      cb(new DigestMismatchError(this.what, this.expected, { digest, size: this.bytes }));
      return;
    }
    cb();
  }
}
