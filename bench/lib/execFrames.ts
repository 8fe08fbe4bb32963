// The client's view of one streaming exec over the HTTP API (`POST /v1/sandboxes/:id/exec`):
// NDJSON frames `{started}`, `{stream, data: base64}`..., then `{exit: {...}}` or `{error}`,
// arriving in chunks that need not end on a line. Pure: the caller feeds what it read and the
// times it read it at, so the tally is testable without a sandbox.

export interface ExecExit {
  exitCode: number;
  timedOut?: boolean;
}

export type ExecVerdict = "complete" | "short output" | "timed out" | "exit nonzero" | "error" | "cut off";

export class ExecFrameTally {
  stdoutBytes = 0;
  stderrBytes = 0;
  /** when the first stdout byte arrived (the caller's clock), undefined until then */
  firstOutputAt?: number;
  exit?: ExecExit;
  error?: { code: string; message: string };
  private partial = "";
  private readonly decoder = new TextDecoder();

  /** one chunk of the response body as read, at time `now` */
  feed(chunk: Uint8Array, now: number): void {
    const text = this.partial + this.decoder.decode(chunk, { stream: true });
    const lines = text.split("\n");
    this.partial = lines.pop() ?? "";
    for (const line of lines) if (line.trim()) this.frame(line, now);
  }

  private frame(line: string, now: number): void {
    let f: { stream?: string; data?: string; exit?: ExecExit; error?: { code: string; message: string } };
    try {
      f = JSON.parse(line);
    } catch {
      this.error ??= { code: "bad frame", message: line.slice(0, 200) };
      return;
    }
    if (f.exit) this.exit = f.exit;
    else if (f.error) this.error = f.error;
    else if (f.data !== undefined) {
      const n = Buffer.byteLength(f.data, "base64");
      if (f.stream === "stderr") this.stderrBytes += n;
      else {
        this.stdoutBytes += n;
        if (n > 0) this.firstOutputAt ??= now;
      }
    }
  }

  /**
   * How the exec ended, against the bytes its command prints when it runs to the end. An error
   * frame wins; a body that ended without an exit frame was cut off.
   */
  verdict(expectedStdoutBytes: number): ExecVerdict {
    if (this.error) return "error";
    if (!this.exit) return "cut off";
    if (this.exit.timedOut) return "timed out";
    if (this.exit.exitCode !== 0) return "exit nonzero";
    return this.stdoutBytes === expectedStdoutBytes ? "complete" : "short output";
  }
}
