// Durations as people write them in specs: "30s", "10m", "1h30m", "250ms", "0", or a number of seconds.
import { ValidationError } from "../core/errors.ts";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const DURATION_RE = /^(?:\d+(?:ms|h|m|s))+$/;

/** Milliseconds; throws naming the field when the value is not a non-negative duration. */
export function parseDuration(field: string, value: unknown): number {
  if (typeof value === "number") {
    if (Number.isFinite(value) && value >= 0) return Math.round(value * 1000);
    throw new ValidationError(field, value, "use a non-negative number of seconds or a duration like 30s, 10m, 1h30m");
  }
  if (typeof value === "string") {
    const v = value.trim();
    if (v === "0") return 0;
    if (DURATION_RE.test(v)) {
      let ms = 0;
      for (const m of v.matchAll(/(\d+)(ms|h|m|s)/g)) ms += Number(m[1]) * UNIT_MS[m[2]];
      return ms;
    }
  }
  throw new ValidationError(field, value, "use a non-negative duration like 30s, 10m, 1h30m (units ms, s, m, h; no sign, no spaces) or a number of seconds");
}
