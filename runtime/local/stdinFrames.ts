// A command's stdin on its way to the helper: bytes become 'I' frames of up to a megabyte.
//
// Input is copied into two reusable frame buffers: one fills while the other is being written
// to the socket. The copy costs less than it saves: bulk input (a resume's layer, from HTTP)
// arrives as 64 KiB buffers, and holding on to them until the socket takes them lets them
// outlive the young generation, which made garbage collection the largest cost of a resume
// (about 2 s of CPU per GiB against 0.3 s when they die young). Memory: two frames.
import type net from "node:net";
import { Writable } from "node:stream";

/** the largest frame the helper accepts (MAX_FRAME in sbx-helper.c) */
export const MAX_STDIN_FRAME = 1024 * 1024;

export function frameHeader(type: string, length: number): Buffer {
  const h = Buffer.allocUnsafe(5);
  h[0] = type.charCodeAt(0);
  h.writeUInt32BE(length, 1);
  return h;
}

/**
 * Writes what it is given to `sock` as 'I' frames and ends with an 'E' frame. A frame is sent
 * as soon as the socket is idle, so small input is not held back; while a frame is being
 * written the next one fills, so bulk input goes out in full frames.
 */
export class StdinFrames extends Writable {
  private readonly buffers: Buffer[];
  /** index of the buffer that fills; the other one may be in flight */
  private current = 0;
  private filled = 0;
  private inFlight = false;
  /** a write waiting for the buffer in flight to come back */
  private blocked?: () => void;

  constructor(
    private readonly sock: net.Socket,
    private readonly frameBytes = MAX_STDIN_FRAME,
  ) {
    super({ highWaterMark: frameBytes });
    // the second buffer only once a frame is in flight: small input never needs it
    this.buffers = [Buffer.allocUnsafe(frameBytes)];
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    let at = 0;
    const step = () => {
      const buf = this.buffers[this.current];
      while (at < chunk.length) {
        if (this.filled === buf.length) {
          if (this.inFlight) {
            this.blocked = step;
            return;
          }
          this.send();
          return step();
        }
        const n = chunk.copy(buf, this.filled, at);
        this.filled += n;
        at += n;
      }
      if (!this.inFlight) this.send();
      cb();
    };
    step();
  }

  override _final(cb: (err?: Error | null) => void): void {
    const end = () => {
      if (this.inFlight) {
        this.blocked = end;
        return;
      }
      if (this.filled > 0) {
        this.send();
        return end();
      }
      if (this.sock.writable) this.sock.write(frameHeader("E", 0));
      cb();
    };
    end();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.blocked = undefined;
    cb(err);
  }

  /** Sends the filling buffer (the other one must be free) and switches to the other. */
  private send(): void {
    if (this.filled === 0) return;
    const frame = this.buffers[this.current].subarray(0, this.filled);
    this.current = 1 - this.current;
    this.buffers[this.current] ??= Buffer.allocUnsafe(this.frameBytes);
    this.filled = 0;
    this.inFlight = true;
    this.sock.cork();
    this.sock.write(frameHeader("I", frame.length));
    this.sock.write(frame, (err) => {
      this.inFlight = false;
      if (err) return void this.destroy(err);
      const next = this.blocked;
      this.blocked = undefined;
      // what arrived meanwhile goes out now, not with the next write (there may be none)
      if (next) next();
      else this.send();
    });
    this.sock.uncork();
  }
}
