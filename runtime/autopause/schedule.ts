// Parsing the time a schedule probe prints. Strict on purpose: anything else (milliseconds,
// units, JSON, log lines, times without a zone) yields no schedule rather than a wrong one.

const UNIX_RE = /^[1-9]\d{0,11}$/;
// RFC3339: date, 'T' (or 't'/space is not allowed here), time with optional fraction, and a zone
const RFC3339_RE = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

/** unix seconds as a positive integer; surrounding whitespace is ignored */
export function parseUnixSeconds(text: string): Date | undefined {
  const t = text.trim();
  if (!UNIX_RE.test(t)) return undefined;
  const d = new Date(Number(t) * 1000);
  return Number.isNaN(d.getTime()) ? undefined : d;
}

/** RFC3339 with a zone (Z or ±hh:mm); surrounding whitespace is ignored */
export function parseDatetime(text: unknown): Date | undefined {
  if (typeof text !== "string") return undefined;
  const t = text.trim();
  const m = RFC3339_RE.exec(t);
  if (!m) return undefined;
  const [, _y, mo, d, h, mi, s] = m.map(Number);
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return undefined;
  const date = new Date(t);
  if (Number.isNaN(date.getTime())) return undefined;
  // reject calendar overflow such as 2026-02-31 (Date would roll it into March)
  const offset =
    m[8].toUpperCase() === "Z"
      ? 0
      : (m[8][0] === "-" ? -1 : 1) * (Number(m[8].slice(1, 3)) * 60 + Number(m[8].slice(4, 6)));
  const local = new Date(date.getTime() + offset * 60_000);
  if (local.getUTCDate() !== d || local.getUTCMonth() + 1 !== mo) return undefined;
  return date;
}

export function parseScheduleTime(text: string, format: "unix" | "datetime"): Date | undefined {
  return format === "unix" ? parseUnixSeconds(text) : parseDatetime(text);
}
