// The command channel's frames (tools/local-helper/daemon.c lists every type): type (1 byte),
// stream id (u32 big endian), payload length (u32 big endian), payload. Pure.
export const HEADER_BYTES = 9;
/** the largest payload either side accepts (CH_MAX_FRAME in channel.h) */
export const MAX_FRAME = 1 << 20;
/** output (and stdin) bytes a stream may have in flight before credit comes back (CH_WINDOW) */
export const WINDOW = 4 * 1024 * 1024;
/**
 * Output bytes a stream may have in flight: the replica's choice, since the replica is where
 * they wait. The daemon opens every stream with WINDOW; the channel grants the rest right after
 * the start (or attach, or tunnel) frame. Widened with CREDIT_STEP so that a step stays a 64th
 * of the window: a step of a quarter or an eighth of it stalled a local transfer (13-33 and ~200
 * MB/s against ~300). Not wider: a reader that stops may have this much plus its 1 MiB buffered
 * here, per stream, and a tenant chooses how many streams it stops reading (16 MiB measured
 * about the same on a loaded machine, docs/benchmarks.md "Channel throughput").
 */
export const OUTPUT_WINDOW = 8 * 1024 * 1024;
/**
 * Output credit goes back in steps of this much: each grant is a websocket message through the
 * API server, the kubelet, the channel process and the daemon. 64 KiB steps were a TLS write per
 * 64 KiB received, a fifth of the manager's CPU on a download (docs/benchmarks.md "Channel throughput").
 */
export const CREDIT_STEP = 128 * 1024;

export interface Frame {
  type: string;
  stream: number;
  /** the payload as it arrived, in pieces: output is pushed on without being copied together */
  parts: Buffer[];
  /** the payload in one buffer (copied together when it came in pieces) */
  readonly payload: Buffer;
}

export function encodeFrame(type: string, stream: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === "string" ? Buffer.from(payload) : payload;
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  out[0] = type.charCodeAt(0);
  out.writeUInt32BE(stream >>> 0, 1);
  out.writeUInt32BE(body.length, 5);
  body.copy(out, HEADER_BYTES);
  return out;
}

/** just the header of a frame whose payload is sent after it */
export function frameHeader(type: string, stream: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES);
  out[0] = type.charCodeAt(0);
  out.writeUInt32BE(stream >>> 0, 1);
  out.writeUInt32BE(length, 5);
  return out;
}

export function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}

/** NUL-separated fields, as the daemon splits them (an empty field cannot be told from none) */
export function fields(values: (string | number)[]): Buffer {
  return Buffer.from(values.map((v) => `${v}\0`).join(""));
}

export class FrameError extends Error {}

/**
 * Splits a byte stream into frames without copying payloads. What comes from the pod is
 * untrusted input: a length past MAX_FRAME throws instead of waiting for (and buffering) a
 * gigabyte that will never be valid.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private held = 0;

  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.held += chunk.length;
    const frames: Frame[] = [];
    while (this.held >= HEADER_BYTES) {
      const head = this.header();
      const len = head.readUInt32BE(5);
      if (len > MAX_FRAME) throw new FrameError(`frame of ${len} bytes is over the limit of ${MAX_FRAME}`);
      if (this.held < HEADER_BYTES + len) break;
      this.take(HEADER_BYTES);
      const parts = this.take(len);
      frames.push({
        type: String.fromCharCode(head[0]),
        stream: head.readUInt32BE(1),
        parts,
        get payload() {
          return parts.length === 1 ? parts[0] : Buffer.concat(parts);
        },
      });
    }
    return frames;
  }

  /** the next header's bytes, joining only as many chunks as it spans */
  private header(): Buffer {
    let joined = this.chunks[0];
    for (let i = 1; joined.length < HEADER_BYTES; i++) joined = Buffer.concat([joined, this.chunks[i]]);
    return joined.subarray(0, HEADER_BYTES);
  }

  private take(n: number): Buffer[] {
    const parts: Buffer[] = [];
    this.held -= n;
    while (n > 0) {
      const first = this.chunks[0];
      if (first.length <= n) {
        parts.push(first);
        this.chunks.shift();
        n -= first.length;
      } else {
        parts.push(first.subarray(0, n));
        this.chunks[0] = first.subarray(n);
        n = 0;
      }
    }
    return parts;
  }
}

/** "exit:N" | "signal:N" | "timeout:N" | "killed:N" from the daemon's 'X' frame */
export function parseExit(text: string): { kind: "exit" | "signal" | "timeout" | "killed"; code: number } {
  const m = /^(exit|signal|timeout|killed):(\d+)$/.exec(text);
  if (!m) throw new FrameError(`exit frame ${JSON.stringify(text.slice(0, 60))} is not kind:code`);
  return { kind: m[1] as "exit" | "signal" | "timeout" | "killed", code: Number(m[2]) };
}

export interface ListedCommand {
  id: string;
  pid: number;
  state: "running" | "exited";
  /** as parseExit reads it; absent while running */
  exit?: string;
  /** the label its start carried (StartCommand.label), while it runs; absent without one */
  label?: string;
}

/**
 * A start's label travels as its last env entry with this prefix (daemon.c 'S'): no variable
 * name is empty, so it is never a caller's variable, and a daemon from before labels passes it
 * into the command's environment instead of refusing the start, so a running pod keeps working.
 */
export const LABEL_ENV = "=sbx-label=";
/**
 * A start on a pseudo-terminal carries one more field after its env: "pty=COLS ROWS" (daemon.c
 * 'S'). Not an env entry on purpose: a daemon from before terminals (a pod started by an older
 * replica keeps its daemon) counts the fields, answers REFUSALS.malformed and runs nothing,
 * where an env entry would have run the command on pipes.
 */
export const PTY_FIELD = "pty=";
/** the longest label the daemon keeps (registry.h LABEL_MAX); base64url, so no TAB or newline */
export const LABEL_MAX = 8192;

/** The daemon's words in an 'F' frame, as UpstreamError details.refusal carries them. */
export const REFUSALS = {
  displaced: "attached by another reader",
  unknown: "no such command",
  malformed: "malformed start frame",
} as const;

export function parseList(payload: Buffer): ListedCommand[] {
  return payload
    .toString("utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => {
      // a daemon from before labels sends four fields
      const [id, pid, state, exit, label] = l.split("\t");
      return {
        id,
        pid: Number(pid),
        state: state === "exited" ? "exited" : "running",
        ...(exit !== "-" ? { exit } : {}),
        ...(label !== undefined && label !== "-" ? { label } : {}),
      };
    });
}
