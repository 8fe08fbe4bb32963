// Tenant-supplied regular expressions (autoPause messageRegex), matched in time linear in the
// input. JavaScript's own engine backtracks: `^(a+)+$` against 27 a's and "!" held the
// service's event loop for 7 s, for every tenant. RE2 (re2js, a pure-JS port) never
// backtracks, so a match costs at most (program size x input length) steps; both are bounded
// here, so one match costs milliseconds at worst, and a result is remembered per input so
// the once-a-second re-decision of an unchanged probe message costs nothing.
import { RE2JS, RE2JSException } from "re2js";
import { invalid } from "./strict.ts";

export const PATTERN_LIMITS = {
  /** characters of pattern text */
  chars: 512,
  /**
   * RE2 program instructions (`^inactive$` is 12, `\p{L}{126}` is 128). The first match of a
   * fresh message builds DFA states; measured under a load average of 20 on 2 cores, the worst
   * first match over 1,024 characters was about 7 ms at 128 instructions and 200 ms at 256.
   */
  program: 128,
  /** characters of input a pattern sees; probe.ts cuts the trimmed probe message to this length */
  input: 1024,
} as const;

const FIX =
  'use a non-empty JavaScript regular expression limited to RE2 syntax (matched in linear time: backreferences and lookaround are not supported; write \\x{e9} for \\u00e9), e.g. "^inactive$"';

/**
 * A RegExp whose matching runs on RE2. It stays a RegExp (source, flags, toString, instanceof)
 * because the policy has always carried one; the JavaScript engine never sees the tenant's
 * pattern (the RegExp underneath is the empty pattern), and every matching entry point goes to
 * RE2 or refuses.
 */
export class LinearRegExp extends RegExp {
  readonly #re: RE2JS;
  readonly #results = new Map<string, boolean>();

  constructor(re: RE2JS) {
    super("(?:)");
    this.#re = re;
  }

  override get source(): string {
    return this.#re.pattern();
  }

  override get flags(): string {
    return "";
  }

  override test(input: string): boolean {
    const text = String(input).slice(0, PATTERN_LIMITS.input);
    const known = this.#results.get(text);
    if (known !== undefined) return known;
    const result = this.#re.test(text);
    // a handful of distinct messages per pattern is the normal case; forget all past 64
    if (this.#results.size >= 64) this.#results.clear();
    this.#results.set(text, result);
    return result;
  }

  override exec(input: string): RegExpExecArray | null {
    return this.#re.exec(String(input).slice(0, PATTERN_LIMITS.input)) as RegExpExecArray | null;
  }

  // split and matchAll build a new RegExp from this one's hidden empty pattern; refuse rather
  // than silently match the wrong thing (nothing here needs them)
  override [Symbol.split](): string[] {
    throw new TypeError("LinearRegExp: split is not supported; use test or exec");
  }

  override [Symbol.matchAll](): IterableIterator<RegExpMatchArray> {
    throw new TypeError("LinearRegExp: matchAll is not supported; use test or exec");
  }

  override compile(): this {
    throw new TypeError("LinearRegExp: a tenant pattern cannot be recompiled");
  }
}

// Compiled patterns by text: the runtime re-validates every stored policy on each automatic
// pause/wake tick; compiling costs up to a few milliseconds (more while the engine's code is cold).
const compiled = new Map<string, LinearRegExp>();
const MAX_COMPILED = 1024;

/** The tenant's pattern compiled for linear-time matching; a ValidationError naming `field` otherwise. */
export function compileTenantPattern(field: string, value: unknown): LinearRegExp {
  if (typeof value !== "string" || value === "") invalid(field, value, FIX);
  if (value.length > PATTERN_LIMITS.chars)
    invalid(field, value, `${FIX}; at most ${PATTERN_LIMITS.chars} characters (this one has ${value.length})`);
  const hit = compiled.get(value);
  if (hit) return hit;
  let re: RE2JS;
  try {
    re = RE2JS.compile(value);
  } catch (err) {
    if (!(err instanceof RE2JSException)) throw err;
    // the engine quotes the offending part of the pattern; keep the message short all the same
    invalid(field, value, `${FIX}; RE2 says: ${err.message.replace(/^error parsing regexp: /, "").slice(0, 160)}`);
  }
  if (re.programSize() > PATTERN_LIMITS.program) {
    invalid(
      field,
      value,
      `${FIX}; this pattern compiles to ${re.programSize()} RE2 instructions, over the limit of ${PATTERN_LIMITS.program}: use smaller repeat counts ({n}) or fewer alternatives`,
    );
  }
  const out = new LinearRegExp(re);
  if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value as string);
  compiled.set(value, out);
  return out;
}
