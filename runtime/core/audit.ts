// Audit: every state-changing call (create, exec, file put, pause, resume, kill) is recorded
// with owner, sandbox, time and outcome through the AuditStore seam. The default writes one
// JSON object per line to a file (config.audit.path) or, without a path, to the logger.
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "./log.ts";

export type AuditOp = "create" | "exec" | "put" | "pause" | "resume" | "kill" | "reap" | "update";

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

/**
 * How much of a request an audit entry keeps. One exec may carry ~8 MB of argv; recorded whole,
 * a few requests would grow the audit log by gigabytes. Strings and lists are cut with a marker
 * that gives the original size, so the record still says what was truncated and by how much.
 */
export const AUDIT_BOUNDS = {
  stringChars: 256,
  listItems: 32,
  depth: 4,
  messageChars: 2048,
  detailsChars: 16 * 1024,
} as const;

function truncatedString(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)}...[truncated: ${s.length} characters in all]`;
}

function boundValue(v: unknown, depth: number): unknown {
  if (typeof v === "string") return truncatedString(v, AUDIT_BOUNDS.stringChars);
  if (v === null || typeof v !== "object") return v;
  if (depth >= AUDIT_BOUNDS.depth) return "[truncated: nested too deep]";
  if (Array.isArray(v)) {
    const kept = v.slice(0, AUDIT_BOUNDS.listItems).map((x) => boundValue(x, depth + 1));
    return v.length > AUDIT_BOUNDS.listItems ? [...kept, `...[truncated: ${v.length} items in all]`] : kept;
  }
  const entries = Object.entries(v as Record<string, unknown>);
  const out: Record<string, unknown> = {};
  for (const [k, x] of entries.slice(0, AUDIT_BOUNDS.listItems))
    out[truncatedString(k, 128)] = boundValue(x, depth + 1);
  if (entries.length > AUDIT_BOUNDS.listItems) out["...truncated"] = `${entries.length} keys in all`;
  return out;
}

/** The entry as it is stored: details and message bounded (see AUDIT_BOUNDS). Pure; copies. */
export function boundAuditEntry(entry: AuditEntry): AuditEntry {
  const out: AuditEntry = { ...entry };
  if (entry.details !== undefined) {
    const details = boundValue(entry.details, 0) as Record<string, unknown>;
    // the per-value cuts bound any details our callers build; this catches one that nests wide
    const size = JSON.stringify(details).length;
    out.details =
      size <= AUDIT_BOUNDS.detailsChars
        ? details
        : {
            truncated: `details of ${size} characters after per-value truncation`,
            keys: Object.keys(details).slice(0, AUDIT_BOUNDS.listItems),
          };
  }
  if (entry.message !== undefined) out.message = truncatedString(entry.message, AUDIT_BOUNDS.messageChars);
  return out;
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
    this.out.write(`${JSON.stringify(boundAuditEntry(entry))}\n`);
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
    const { time, ...rest } = boundAuditEntry(entry); // pino writes its own `time`; keep the audit's as `at`
    this.log.info({ ...rest, at: time }, `audit ${entry.op} ${entry.outcome}`);
  }
  async close(): Promise<void> {}
}

/** Keeps entries in memory; for tests that assert on what was audited, and for embedding. */
export class MemoryAuditStore implements AuditStore {
  readonly entries: AuditEntry[] = [];
  record(entry: AuditEntry): void {
    this.entries.push(boundAuditEntry(entry));
  }
  async close(): Promise<void> {}
}

export function createAuditStore(cfg: { path?: string }, logger: Logger): AuditStore {
  return cfg.path ? new FileAuditStore(cfg.path, logger) : new LoggerAuditStore(logger);
}
