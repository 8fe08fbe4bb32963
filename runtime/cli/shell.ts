// `sbx shell ID [-- CMD...]`: an interactive terminal in a sandbox, like `docker exec -it`. The
// command (default the sandbox's login shell) runs on a pty of this terminal's size; this terminal
// goes to raw mode (when stdin is one) so every key, ^C included, reaches the sandbox; a resize
// here (SIGWINCH) resizes it there; the command's exit code is sbx's. `~.` typed at the start of a
// line, or the connection closing, ends the session and restores the terminal. Over the Manager
// seam: the service's terminal websocket with SBX_SERVER (runtime/client/terminal.ts), or the
// platform's pty exec in-process.
import { PassThrough } from "node:stream";
import { finished } from "node:stream/promises";
import type { ReadStream, WriteStream } from "node:tty";
import { DEFAULT_TERMINAL_COMMAND, DEFAULT_TERMINAL_SIZE } from "../core/terminal.ts";
import type { ExecSession, TerminalSize } from "../core/types.ts";
import { keyValues, need, parse } from "./args.ts";
import type { Command, Io } from "./command.ts";

/** sbx's exit code when the session was cut with `~.` (as ssh's 255: not the command's own) */
export const ESCAPE_EXIT_CODE = 255;

const CR = 0x0d;
const LF = 0x0a;
const TILDE = 0x7e;
const DOT = 0x2e;

/**
 * The `~.` escape, as ssh reads it: a `~` right after a newline (or at the very start) is held;
 * `.` next ends the session, `~` next sends one `~`, anything else sends both. Returns what to
 * forward from each chunk of input.
 */
export class EscapeScanner {
  private atLineStart = true;
  private held = false;

  scan(chunk: Buffer): { forward: Buffer; quit: boolean } {
    const out: number[] = [];
    for (const b of chunk) {
      if (this.held) {
        this.held = false;
        if (b === DOT) return { forward: Buffer.from(out), quit: true };
        out.push(TILDE);
        if (b === TILDE) {
          this.atLineStart = false;
          continue;
        }
      } else if (this.atLineStart && b === TILDE) {
        this.held = true;
        continue;
      }
      out.push(b);
      this.atLineStart = b === CR || b === LF;
    }
    return { forward: Buffer.from(out), quit: false };
  }
}

function sizeOf(out: Io["stdout"]): TerminalSize {
  const tty = out as Partial<WriteStream>;
  return tty.isTTY && tty.columns && tty.rows ? { cols: tty.columns, rows: tty.rows } : DEFAULT_TERMINAL_SIZE;
}

export const shell: Command = async (ctx, argv) => {
  const usage = "sbx shell ID [--env K=V]... [--cwd DIR] [-- COMMAND [ARGS...]]";
  const a = parse(argv, { env: { type: "string", multiple: true }, cwd: { type: "string" } }, usage);
  need(a.positionals, 1, usage);
  const given = a.rest.length > 0 ? a.rest : a.positionals.slice(1);
  const input = new PassThrough();
  const session = await ctx.manager.exec(ctx.owner, a.positionals[0], {
    command: given.length > 0 ? given : DEFAULT_TERMINAL_COMMAND,
    env: keyValues("--env", a.values.env),
    cwd: a.values.cwd as string | undefined,
    stdin: input,
    pty: sizeOf(ctx.io.stdout),
  });
  return attach(ctx.io, session, input);
};

// Over 60 lines on purpose: the terminal's state (raw mode, listeners) is set up and undone in one
// place, so every way out (exit, ~., a lost connection, a signal to sbx) restores it the same way.
async function attach(io: Io, session: ExecSession, input: PassThrough): Promise<number> {
  const stdin = io.stdin as Partial<ReadStream> & Io["stdin"];
  const stdout = io.stdout as Partial<WriteStream> & Io["stdout"];
  const tty = stdin.isTTY === true && typeof stdin.setRawMode === "function";
  const scanner = tty ? new EscapeScanner() : undefined;
  let escaped = false;
  const onInput = (chunk: Buffer | string) => {
    const bytes = Buffer.from(chunk);
    if (!scanner) return void input.write(bytes);
    const { forward, quit } = scanner.scan(bytes);
    if (forward.length) input.write(forward);
    if (quit) {
      escaped = true;
      session.kill();
    }
  };
  const onResize = () => session.resize?.(sizeOf(stdout));
  const onSignal = () => session.kill();
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    stdin.off("data", onInput);
    stdin.pause();
    if (tty) stdin.setRawMode!(false);
    stdout.off("resize", onResize);
    for (const s of ["SIGTERM", "SIGHUP"] as const) process.off(s, onSignal);
  };
  if (tty) stdin.setRawMode!(true);
  stdin.on("data", onInput);
  stdin.resume();
  stdout.on("resize", onResize);
  for (const s of ["SIGTERM", "SIGHUP"] as const) process.on(s, onSignal);
  session.stdout.on("data", (c: Buffer) => {
    if (!stdout.write(c)) {
      session.stdout.pause();
      stdout.once("drain", () => session.stdout.resume());
    }
  });
  session.stderr.resume();
  try {
    const result = await session.result;
    // the last of the output before the prompt that follows sbx
    await finished(session.stdout).catch(() => undefined);
    if (escaped) return ESCAPE_EXIT_CODE;
    return result.exitCode;
  } catch (err) {
    if (escaped) return ESCAPE_EXIT_CODE;
    throw err;
  } finally {
    restore();
    input.end();
    if (escaped) io.stderr.write("\r\nsbx: connection closed (~.)\r\n");
  }
}
