// Audit: every state-changing call (create, exec, file put, pause, resume, kill) is recorded
// with owner, sandbox, time and outcome through the AuditStore seam. The default writes one
// JSON object per line to a file (config.audit.path) or, without a path, to the logger.
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "./log.ts";

export type AuditOp = "create" | "exec" | "put" | "pause" | "resume" | "kill" | "reap";

export interface AuditEntry {
  time: string;
  op: AuditOp;
  owner: string;
  sandbox?: string;
  outcome: "ok" | "error";
  /** the SbxError code (or "internal") when outcome is error */
  error?: string;
  message?: string;
  /** op-specific facts: the command for exec, the reason for reap, the target dir for put */
  details?: Record<string, unknown>;
}

export interface AuditStore {
  record(entry: AuditEntry): void;
  close(): Promise<void>;
}

/** Appends JSON lines to a file; the stream buffers so a record never blocks a request. */
export class FileAuditStore implements AuditStore {
  private readonly out: WriteStream;
  constructor(path: string, logger: Logger) {
    mkdirSync(dirname(path), { recursive: true });
    this.out = createWriteStream(path, { flags: "a", mode: 0o600 });
    this.out.on("error", (err) => logger.error({ op: "audit", path, err }, "audit log write failed"));
  }
  record(entry: AuditEntry): void {
    this.out.write(`${JSON.stringify(entry)}\n`);
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.out.end(resolve));
  }
}

/** Audit entries as structured log lines (the default when no audit path is configured). */
export class LoggerAuditStore implements AuditStore {
  private readonly log: Logger;
  constructor(logger: Logger) {
    this.log = logger.child({ audit: true });
  }
  record(entry: AuditEntry): void {
    const { time, ...rest } = entry; // pino writes its own `time`; keep the audit's as `at`
    this.log.info({ ...rest, at: time }, `audit ${entry.op} ${entry.outcome}`);
  }
  async close(): Promise<void> {}
}

/** Keeps entries in memory; for tests that assert on what was audited, and for embedding. */
export class MemoryAuditStore implements AuditStore {
  readonly entries: AuditEntry[] = [];
  record(entry: AuditEntry): void {
    this.entries.push(entry);
  }
  async close(): Promise<void> {}
}

export function createAuditStore(cfg: { path?: string }, logger: Logger): AuditStore {
  return cfg.path ? new FileAuditStore(cfg.path, logger) : new LoggerAuditStore(logger);
}
