// What E2B's List returns about a process (cmd, args, envs, cwd, tag, whether it took stdin,
// the window it was started on a pty with: another replica then types into it as a terminal),
// carried as the opaque label the in-sandbox registry keeps with the command (ExecRequest.label),
// so every replica, and a restarted one, can answer List. Pure.
//
// The envs are in it: the SDK's List returns them. They are the sandbox owner's own values, already
// in the command's environment in the same sandbox; the label lives only in the helper daemon's
// memory (not on disk, not in a snapshot), comes back only to callers holding the sandbox's
// access token, and is never logged (docs/e2b.md "Processes by pid").
import type { ProcessSpec } from "./registry.ts";

/** the daemon's bound (registry.h LABEL_MAX), in base64url characters */
export const LABEL_MAX_CHARS = 8192;

export interface ProcessLabel {
  spec: ProcessSpec;
  stdin: boolean;
  /** true when envs (then args) were left out to fit the bound */
  cut?: boolean;
}

interface Wire {
  v: 1;
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  tag?: string;
  stdin: boolean;
  pty?: { cols: number; rows: number };
  cut?: true;
}

const encode = (w: Wire) => Buffer.from(JSON.stringify(w)).toString("base64url");

/** The label; a spec too large for the bound loses its envs, then its args, and says so. */
export function encodeProcessLabel(spec: ProcessSpec, stdin: boolean): string {
  const base: Wire = { v: 1, cmd: spec.cmd, args: spec.args, envs: spec.envs, stdin };
  if (spec.cwd !== undefined) base.cwd = spec.cwd;
  if (spec.tag !== undefined) base.tag = spec.tag;
  if (spec.pty !== undefined) base.pty = { cols: spec.pty.cols, rows: spec.pty.rows };
  for (const w of [
    base,
    { ...base, envs: {}, cut: true as const },
    { ...base, envs: {}, args: [], cut: true as const },
  ]) {
    const label = encode(w);
    if (label.length <= LABEL_MAX_CHARS) return label;
  }
  // a cmd or tag alone past the bound: what is left names the process by its pid only
  const pty = spec.pty && { pty: { cols: spec.pty.cols, rows: spec.pty.rows } };
  return encode({ v: 1, cmd: spec.cmd.slice(0, 1024), args: [], envs: {}, stdin, cut: true, ...pty });
}

const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");
const isStringMap = (v: unknown): v is Record<string, string> =>
  !!v && typeof v === "object" && !Array.isArray(v) && Object.values(v).every((x) => typeof x === "string");

/** The label read back; undefined for one this layer did not write (another client of the registry). */
export function decodeProcessLabel(label: string): ProcessLabel | undefined {
  let w: Partial<Wire>;
  try {
    w = JSON.parse(Buffer.from(label, "base64url").toString("utf8")) as Partial<Wire>;
  } catch {
    return undefined;
  }
  if (w?.v !== 1 || typeof w.cmd !== "string" || !isStrings(w.args) || !isStringMap(w.envs)) return undefined;
  if (typeof w.stdin !== "boolean") return undefined;
  const spec: ProcessSpec = { cmd: w.cmd, args: w.args, envs: w.envs };
  if (typeof w.cwd === "string") spec.cwd = w.cwd;
  if (typeof w.tag === "string") spec.tag = w.tag;
  if (Number.isInteger(w.pty?.cols) && Number.isInteger(w.pty?.rows))
    spec.pty = { cols: w.pty!.cols, rows: w.pty!.rows };
  return { spec, stdin: w.stdin, ...(w.cut ? { cut: true } : {}) };
}
