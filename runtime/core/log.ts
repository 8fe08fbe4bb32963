// Structured JSON logs (pino) with bindings such as {sandbox, owner, op}; a person at a terminal
// gets the same records as one readable line each (logFormat.ts). Human form only when stderr
// is a TTY, so log shippers and `2> file` always get JSON.
import { type DestinationStream, type Logger, pino } from "pino";
import { formatLogLine } from "./logFormat.ts";

export type { Logger };

export interface LoggerOptions {
  /** default info; main passes the validated SBX_LOG_LEVEL (runtime/config/load.ts) */
  level?: string;
  name?: string;
  /** human-readable lines instead of JSON; default: whether stderr is a terminal */
  pretty?: boolean;
  /** where lines go; default stderr (asynchronous) */
  destination?: DestinationStream;
}

/** Human lines on a terminal, JSON everywhere else. */
export function shouldPrettyPrint(stream: { isTTY?: boolean }): boolean {
  return stream.isTTY === true;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const out = opts.destination ?? pino.destination({ fd: 2, sync: false });
  const pretty = opts.pretty ?? shouldPrettyPrint(process.stderr);
  // pino writes one JSON line per write call; the pretty sink rewrites each before passing it on
  const sink: DestinationStream = pretty ? { write: (line: string) => out.write(formatLogLine(line)) } : out;
  return pino({ name: opts.name ?? "sbx", level: opts.level ?? "info" }, sink);
}

/** A logger that drops everything, for tests that don't assert on logs. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
