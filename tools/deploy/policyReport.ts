// Which policy packs an engine run loaded. The summary event's `policyPacks` stays empty for
// packs given by path (`--policy-pack <dir>`), so the driver reads the "Policies:" block the
// CLI prints at the end of a preview or update:
//
//   Policies:
//       ✅ sbx-security@v0.1.0 (local: /work/main/policy)
//
// Pure: text in, name -> version out.

const PACK_LINE = /^\s+\S+\s+([\w.-]+)@v(\S+) \((?:local: )?[^)]*\)\s*$/;

export function policyPacksInOutput(output: string): Record<string, string> {
  const packs: Record<string, string> = {};
  let inBlock = false;
  for (const line of output.split("\n")) {
    if (/^Policies:\s*$/.test(line)) {
      inBlock = true;
      continue;
    }
    if (!inBlock) continue;
    const m = PACK_LINE.exec(line);
    if (m) packs[m[1]] = m[2];
    else if (line.trim() === "" || /^\S/.test(line)) inBlock = false;
  }
  return packs;
}
