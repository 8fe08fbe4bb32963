// A seeded pseudo-random byte stream from SHAKE256 so payloads cannot be deduplicated or
// compressed away, and anyone can regenerate them: block i (1 MiB) is
// SHAKE256(seed as 8-byte big-endian || i as 8-byte big-endian) truncated to the block length.
import { createHash } from "node:crypto";
import { Readable } from "node:stream";

export const BENCH_SEED = 20261004;
export const SHAKE_BLOCK = 1 << 20;

export function shakeBlock(seed: number, index: number, length = SHAKE_BLOCK): Buffer {
  const input = Buffer.alloc(16);
  input.writeBigUInt64BE(BigInt(seed), 0);
  input.writeBigUInt64BE(BigInt(index), 8);
  return createHash("shake256", { outputLength: length }).update(input).digest();
}

/** `bytes` bytes of the seeded stream; the SHA-256 of what was produced is reported at the end. */
export function shakeStream(seed: number, bytes: number, onDone?: (sha256hex: string) => void): Readable {
  const sha = createHash("sha256");
  let index = 0;
  let left = bytes;
  return new Readable({
    highWaterMark: SHAKE_BLOCK,
    read() {
      if (left === 0) {
        onDone?.(sha.digest("hex"));
        this.push(null);
        return;
      }
      const n = Math.min(left, SHAKE_BLOCK);
      const block = shakeBlock(seed, index++, SHAKE_BLOCK).subarray(0, n);
      left -= n;
      sha.update(block);
      this.push(block);
    },
  });
}
