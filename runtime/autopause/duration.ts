// Durations as people write them in specs: "30s", "10m", "1h30m", "250ms", "0", or a number of seconds.
import { invalid } from "./strict.ts";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const DURATION_RE = /^(?:\d+(?:ms|h|m|s))+$/;
/** 366 days: longer than any pause rule needs, and far inside what a Date can hold (a bigger one made status writes throw) */
export const MAX_DURATION_MS = 366 * 24 * 3_600_000;
/** characters of a duration string, checked before any pattern runs */
const MAX_DURATION_CHARS = 64;

const FIX =
  "use a non-negative duration like 30s, 10m, 1h30m (units ms, s, m, h; no sign, no spaces) or a number of seconds";

/** Milliseconds; throws naming the field when the value is not a non-negative duration of at most 366 days. */
export function parseDuration(field: string, value: unknown): number {
  const ms = durationMs(field, value);
  if (ms > MAX_DURATION_MS) invalid(field, value, `use at most 366 days (8784h, ${MAX_DURATION_MS / 1000} seconds)`);
  return ms;
}

function durationMs(field: string, value: unknown): number {
  if (typeof value === "number") {
    if (Number.isFinite(value) && value >= 0) return Math.round(value * 1000);
    invalid(field, value, "use a non-negative number of seconds or a duration like 30s, 10m, 1h30m");
  }
  if (typeof value === "string" && value.length <= MAX_DURATION_CHARS) {
    const v = value.trim();
    if (v === "0") return 0;
    if (DURATION_RE.test(v)) {
      let ms = 0;
      for (const m of v.matchAll(/(\d+)(ms|h|m|s)/g)) ms += Number(m[1]) * UNIT_MS[m[2]];
      return ms;
    }
  }
  invalid(field, value, FIX);
}
