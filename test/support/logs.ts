// A real pino logger whose lines are kept in memory, for tests that assert what was logged.
import { type Logger, pino } from "pino";

export interface CapturedLog {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export function captureLogger(): { logger: Logger; lines: CapturedLog[] } {
  const lines: CapturedLog[] = [];
  const logger = pino(
    { level: "debug" },
    { write: (line: string) => void lines.push(JSON.parse(line) as CapturedLog) },
  );
  return { logger, lines };
}

/** pino's numeric levels */
export const LEVEL = { debug: 20, info: 30, warn: 40, error: 50 } as const;
