// What a CLI verb is and how verbs print: shared by commands.ts (the sandbox verbs) and bench.ts
// (the measurement verb), so neither imports the other.
import type { Readable, Writable } from "node:stream";
import type { Manager } from "../core/types.ts";

export interface Io {
  stdout: Writable;
  stderr: Writable;
  stdin: Readable;
}

export interface CommandContext {
  manager: Manager;
  owner: string;
  io: Io;
}

/** One verb: its arguments after the verb in, the process exit code out. */
export type Command = (ctx: CommandContext, argv: string[]) => Promise<number>;

/** `value` as JSON for scripts (--json), else the human text, newline-terminated. */
export function print(ctx: CommandContext, json: boolean, value: unknown, human: string): void {
  ctx.io.stdout.write(
    json ? `${JSON.stringify(value, null, 2)}\n` : human.endsWith("\n") || human === "" ? human : `${human}\n`,
  );
}

export function table(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows
    .map((r) =>
      r
        .map((cell, c) => cell.padEnd(widths[c]))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}
