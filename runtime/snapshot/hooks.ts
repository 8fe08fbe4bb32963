// Pre-pause and post-resume hooks: a shell command run inside the sandbox through exec.
import { finished } from "node:stream/promises";
import { ConflictError } from "../core/errors.ts";
import type { Backend } from "../core/types.ts";

export async function runHook(
  backend: Backend,
  id: string,
  name: string,
  command: string,
  timeoutMs: number,
): Promise<void> {
  const session = await backend.exec(id, { command: ["sh", "-c", command], timeoutMs });
  let stderr = "";
  session.stdout.resume();
  session.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString("utf8")).slice(-1000);
  });
  const [r] = await Promise.all([session.result, finished(session.stderr).catch(() => undefined)]);
  if (r.exitCode !== 0) {
    const why = r.timedOut ? `timed out after ${timeoutMs} ms` : `exited ${r.exitCode}`;
    throw new ConflictError(
      `${name} hook of sandbox ${id} ${why}: ${stderr.trim() || "(no stderr)"}; fix the hook command ${JSON.stringify(command)} or remove it`,
      {
        hook: name,
        exitCode: r.exitCode,
      },
    );
  }
}
