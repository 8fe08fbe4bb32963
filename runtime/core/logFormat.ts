// The human form of one pino JSON log line, for a person watching a terminal:
//   09:41:02.123 INFO  sbx: sandbox ready  sandbox=s1 owner=alice op=create ms=412
// Pure: a string in, a string out. Anything that is not a pino line passes through unchanged,
// so nothing written to the log is ever lost to the formatter.

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };
/** Bindings every line carries that a person at a terminal does not need to read. */
const HIDDEN = new Set(["level", "time", "msg", "name", "pid", "hostname", "v"]);

/** A field value as key=value wants it: bare when simple, JSON-quoted otherwise. */
function show(value: unknown): string {
  if (typeof value === "string") return /^[\w.:/@+-]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value);
  return JSON.stringify(value);
}

function clock(time: unknown): string {
  const d = new Date(typeof time === "number" || typeof time === "string" ? time : Number.NaN);
  return Number.isNaN(d.getTime()) ? "--:--:--.---" : d.toISOString().slice(11, 23);
}

interface SerializedError {
  message?: string;
  stack?: string;
}

/** One JSON line (with or without its newline) as a human line, newline-terminated. */
export function formatLogLine(line: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith("\n") ? line : `${line}\n`;
  }
  if (!rec || typeof rec !== "object" || typeof rec.level !== "number") return line.endsWith("\n") ? line : `${line}\n`;
  const level = (LEVELS[rec.level] ?? `L${rec.level}`).padEnd(5);
  const name = typeof rec.name === "string" ? `${rec.name}: ` : "";
  const fields: string[] = [];
  let stack = "";
  for (const [k, v] of Object.entries(rec)) {
    if (HIDDEN.has(k) || v === undefined) continue;
    const err = v as SerializedError;
    if ((k === "err" || k === "error") && v && typeof v === "object" && typeof err.message === "string") {
      fields.push(`${k}=${show(err.message)}`);
      // the stack only where someone will read it: warnings and worse
      if (rec.level >= 40 && typeof err.stack === "string") {
        const frames = err.stack
          .split("\n")
          .slice(1)
          .map((l) => `    ${l.trim()}`);
        if (frames.length) stack = `\n${frames.join("\n")}`;
      }
      continue;
    }
    fields.push(`${k}=${show(v)}`);
  }
  const msg = typeof rec.msg === "string" ? rec.msg : "";
  const tail = fields.length ? `  ${fields.join(" ")}` : "";
  return `${clock(rec.time)} ${level} ${name}${msg}${tail}${stack}\n`;
}
