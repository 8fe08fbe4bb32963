// What a terminal showed so far, and a wait for text on it, for the pty tests on both platforms
// (our exec with `pty`, and the E2B SDK's `pty`): bytes arrive from a stream or an onData callback,
// decoded as UTF-8 across chunk boundaries. The wait is generous because the machine is busy; it
// is a bound far above a normal answer, never the assertion.
import type { Readable } from "node:stream";

export interface TerminalScreen {
  /** everything shown so far */
  readonly text: string;
  /** feed bytes (the E2B SDK's onData) */
  onData(d: Uint8Array): void;
  /** resolves the first match of `re` on the screen; throws with the screen's tail after `ms` */
  waitFor(re: RegExp, ms?: number): Promise<RegExpMatchArray>;
}

/** A screen fed by `from` when given, else through onData. */
export function terminalScreen(from?: Readable): TerminalScreen {
  let text = "";
  const decoder = new TextDecoder();
  const onData = (d: Uint8Array) => {
    text += decoder.decode(d, { stream: true });
  };
  from?.on("data", onData);
  return {
    get text() {
      return text;
    },
    onData,
    async waitFor(re, ms = 30_000) {
      for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
        const m = text.match(re);
        if (m) return m;
      }
      throw new Error(`no ${re} on the terminal within ${ms} ms; it shows ${JSON.stringify(text.slice(-500))}`);
    },
  };
}
