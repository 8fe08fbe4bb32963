// Small helper commands the envd layer runs in a sandbox through the Manager's exec (so
// admission, audit, activity and auto-resume apply as for any exec). Paths and other caller
// values travel as argv entries after the script, never inside it: `sh -c SCRIPT sh "$1" "$2"`,
// so spaces, quotes, newlines and unicode in paths are just bytes.
import type { Readable } from "node:stream";
import { UpstreamError } from "../../../core/errors.ts";
import type { ExecSession, Manager } from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";

/** Exit codes our scripts use to say why they refused; far from what sh, cat or find return. */
export const EXIT = {
  missing: 93,
  isDirectory: 94,
  unreadable: 95,
  notDirectory: 96,
  exists: 97,
  notFile: 98,
} as const;

export interface CommandOutput {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
}

/** Listings bigger than this are refused rather than held in memory. */
const MAX_COLLECTED_BYTES = 32 * 1024 * 1024;

export function startScript(
  manager: Manager,
  caller: EnvdCaller,
  script: string,
  args: string[],
  stdin?: Readable,
): Promise<ExecSession> {
  return manager.exec(caller.owner, caller.sandboxId, { command: ["/bin/sh", "-c", script, "sh", ...args], stdin });
}

/** Runs a script to its end and returns its exit code and output (bounded). */
export async function runScript(
  manager: Manager,
  caller: EnvdCaller,
  script: string,
  args: string[],
  stdin?: Readable,
): Promise<CommandOutput> {
  const session = await startScript(manager, caller, script, args, stdin);
  // input that broke (a cut upload) must end the command, not leave it waiting for more
  const broken = () => stdin?.errored && session.kill();
  if (stdin?.errored) broken();
  stdin?.once("close", broken);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let bytes = 0;
  const collect = (into: Buffer[]) => (c: Buffer) => {
    bytes += c.length;
    if (bytes > MAX_COLLECTED_BYTES) {
      session.kill();
      return;
    }
    into.push(c);
  };
  session.stdout.on("data", collect(out));
  session.stderr.on("data", collect(err));
  const ended = (s: Readable) =>
    new Promise<void>((resolve) => {
      s.once("end", resolve);
      s.once("close", resolve);
      s.once("error", () => resolve());
    });
  const [result] = await Promise.all([session.result, ended(session.stdout), ended(session.stderr)]);
  if (bytes > MAX_COLLECTED_BYTES)
    throw new UpstreamError(
      `the listing is larger than ${MAX_COLLECTED_BYTES} bytes: list a smaller depth or directory`,
    );
  return { exitCode: result.exitCode, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString("utf8") };
}
