// A tar stream whose end is held back until its producer has succeeded. tar writes the
// end-of-archive marker (two zero blocks, then zero padding to a full record) before it exits,
// also when it fails (an unreadable file, a file that shrank): a reader given the whole stream
// would see a well-formed archive and report success. Holding the last bytes until the
// producer says it succeeded (the source ends; a failure errors it) means a failed transfer
// always lacks its end marker, so any tar reader fails on it, whatever the transport reports.
import { Transform, type TransformCallback } from "node:stream";

/**
 * Bytes held back: at least the largest tar record our producers write (64 KiB on the local
 * backend, 10 KiB GNU tar's default on Kubernetes) plus the marker. Memory: this much per
 * transfer; an archive smaller than this is held whole until it is known to be complete.
 */
export const HELD_TAIL_BYTES = 256 * 1024;

export class HeldTail extends Transform {
  private held: Buffer[] = [];
  private heldBytes = 0;
  private started = false;
  /**
   * onFirstBytes runs before the first byte goes out (e.g. to declare a trailer); onComplete
   * once the source ended cleanly, before the last bytes go out (e.g. to add the trailer).
   */
  constructor(private readonly opts: { hold?: number; onFirstBytes?: () => void; onComplete?: () => void } = {}) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    while (this.held.length > 1 && this.heldBytes - this.held[0].length >= (this.opts.hold ?? HELD_TAIL_BYTES)) {
      const first = this.held.shift()!;
      this.heldBytes -= first.length;
      this.forward(first);
    }
    cb();
  }

  /** Runs only when the source ended cleanly: an errored source destroys this stream instead. */
  override _flush(cb: TransformCallback): void {
    this.opts.onComplete?.();
    for (const c of this.held) this.forward(c);
    this.held = [];
    this.heldBytes = 0;
    cb();
  }

  private forward(chunk: Buffer): void {
    if (!this.started) {
      this.started = true;
      this.opts.onFirstBytes?.();
    }
    this.push(chunk);
  }
}
