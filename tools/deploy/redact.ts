// Engine output goes to a log file; the CLI masks secrets it knows about, but a provider error
// can echo a value back (a kubeconfig fragment, a token). Every line is scrubbed of the
// secrets the driver handed the engine before it is written anywhere. Pure.

export const REDACTED = "[redacted]";
/** Secrets shorter than this are not scrubbed: replacing every "abc" would mangle the log. */
const MIN_SECRET = 8;
/** Lines of a multi-line secret shorter than this ("apiVersion: v1") are structure, not secret. */
const MIN_FRAGMENT = 16;

/**
 * A function that replaces every secret, and every line of a multi-line secret (a kubeconfig
 * is printed line by line, or as one base64 field), with REDACTED.
 */
export function makeRedactor(secrets: readonly string[]): (text: string) => string {
  const fragments = new Set<string>();
  for (const s of secrets) {
    if (s.length >= MIN_SECRET) fragments.add(s);
    for (const line of s.split(/\r?\n/)) {
      const t = line.trim();
      if (t.length >= MIN_FRAGMENT) fragments.add(t);
      // `key: value` lines: the value alone also appears in JSON renderings
      const value = /^[\w.-]+:\s*(\S.*)$/.exec(t)?.[1];
      if (value && value.length >= MIN_FRAGMENT) fragments.add(value.replace(/^"|"$/g, ""));
    }
  }
  // longest first, so a whole secret is replaced before the fragments inside it
  const ordered = [...fragments].sort((a, b) => b.length - a.length);
  return (text) => {
    let out = text;
    for (const f of ordered) if (out.includes(f)) out = out.split(f).join(REDACTED);
    return out;
  };
}

/**
 * Splits a stream of chunks into whole lines, so a secret cut across two chunks is still
 * seen whole by the redactor. `flush` hands over the last partial line.
 */
export class LineBuffer {
  private pending = "";
  push(chunk: string): string[] {
    const parts = (this.pending + chunk).split("\n");
    this.pending = parts.pop() ?? "";
    return parts.map((p) => `${p}\n`);
  }
  flush(): string[] {
    const rest = this.pending;
    this.pending = "";
    return rest ? [rest] : [];
  }
}
