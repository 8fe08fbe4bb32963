// Structured JSON logs (pino); human-readable only when stderr is a TTY.
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(opts: { level?: string; name?: string } = {}): Logger {
  return pino(
    { name: opts.name ?? "sbx", level: opts.level ?? process.env.SBX_LOG_LEVEL ?? "info" },
    pino.destination({ fd: 2, sync: false }),
  );
}

/** A logger that drops everything, for tests that don't assert on logs. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
