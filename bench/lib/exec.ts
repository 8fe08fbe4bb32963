// A shell command in a sandbox through the Manager seam, its stdout as text: the read-back
// step of the pause/resume benchmarks. Throws on a non-zero exit, with the command and stderr.
import { finished } from "node:stream/promises";
import type { Manager } from "../../runtime/core/types.ts";

export async function shText(
  m: Pick<Manager, "exec">,
  owner: string,
  id: string,
  script: string,
): Promise<{ stdout: string }> {
  const s = await m.exec(owner, id, { command: ["sh", "-c", script], timeoutMs: 15 * 60_000 });
  let stdout = "";
  let stderr = "";
  s.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  s.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const [r] = await Promise.all([
    s.result,
    finished(s.stdout).catch(() => undefined),
    finished(s.stderr).catch(() => undefined),
  ]);
  if (r.exitCode !== 0)
    throw new Error(`${script.slice(0, 60)}... exited ${r.exitCode}: ${stderr.trim().slice(0, 300)}`);
  return { stdout };
}

/**
 * The read-back command: the whole file with dd (iflag=direct where the filesystem allows),
 * then its SHA-256, the mode used, its size and the kernel boot id, one per line.
 */
export function readBackScript(file: string): string {
  // decide the mode outside the pipeline: a variable set inside a pipeline stage is lost
  return (
    `if dd if=${file} iflag=direct bs=4M count=1 of=/dev/null status=none 2>/dev/null; then d=direct; f=iflag=direct; else d=buffered; f=iflag=fullblock; fi; ` +
    `dd if=${file} $f bs=4M status=none | sha256sum | cut -d' ' -f1; echo $d; stat -c %s ${file}; cat /proc/sys/kernel/random/boot_id`
  );
}
