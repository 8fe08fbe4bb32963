// A small argument parser over node:util parseArgs: options before `--`, the command after it.
// Unknown options are errors naming the option and the command's usage.
import { parseArgs } from "node:util";
import { ValidationError } from "../core/errors.ts";

export type OptionSpec = Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }>;

export interface Parsed {
  values: Record<string, string | boolean | string[] | boolean[] | undefined>;
  positionals: string[];
  /** everything after the first `--` */
  rest: string[];
}

export function parse(argv: readonly string[], options: OptionSpec, usage: string): Parsed {
  const dash = argv.indexOf("--");
  const head = dash === -1 ? [...argv] : argv.slice(0, dash);
  const rest = dash === -1 ? [] : argv.slice(dash + 1);
  try {
    const { values, positionals } = parseArgs({
      args: head,
      options: { ...options, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
      allowPositionals: true,
      strict: true,
    });
    return { values: values as Parsed["values"], positionals, rest };
  } catch (e) {
    throw new ValidationError("arguments", head.join(" "), `${(e as Error).message}; usage: ${usage}`);
  }
}

/** "K=V" pairs into a map; the error names the flag and the bad pair. */
export function keyValues(flag: string, pairs: unknown): Record<string, string> | undefined {
  if (pairs === undefined) return undefined;
  const out: Record<string, string> = {};
  for (const p of pairs as string[]) {
    const i = p.indexOf("=");
    if (i <= 0) throw new ValidationError(flag, p, `use ${flag} KEY=VALUE`);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

/** A whole-number flag; undefined when absent. */
export function intFlag(flag: string, v: unknown, min = 0): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new ValidationError(flag, v, `must be a whole number >= ${min}`);
  return n;
}

/** Durations: "90" (seconds), "90s", "15m", "2h". */
export function durationFlag(flag: string, v: unknown): number | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d+)(s|m|h)?$/.exec(String(v));
  if (!m) throw new ValidationError(flag, v, 'use seconds ("90") or a unit ("90s", "15m", "2h")');
  return Number(m[1]) * (m[2] === "h" ? 3600 : m[2] === "m" ? 60 : 1);
}

export function need(positionals: string[], n: number, usage: string): void {
  if (positionals.length < n)
    throw new ValidationError("arguments", positionals.join(" "), `missing arguments; usage: ${usage}`);
}
