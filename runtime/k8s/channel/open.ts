// Opening a channel into a pod: one exec that runs the helper in channel mode, after one more
// that copies the helper in when the pod does not have it yet. The helper is static, so it runs
// in any image; it goes to /tmp/.sbx-helper/helper-<sha256> (a private directory on the pod's
// writable /tmp), so a pod keeps one copy per helper version and a replica never ships it twice.
// Whatever keeps the helper from running there (no /bin/sh, no writable /tmp, noexec, another
// architecture) makes the answer a fallback with the reason: the backend then execs per command.
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { PassThrough, type Readable } from "node:stream";
import type { Clock } from "../../core/clock.ts";
import type { ExecResult } from "../../core/types.ts";
import type { RunInPod } from "../podExec.ts";
import { CommandChannel } from "./channel.ts";
import { HELPER_DIR } from "./paths.ts";
import type { UploadSlots } from "./uploadSlots.ts";

const MISSING = 3;
/** exec stream up to the hello, daemon start included; a busy API server is slow, not gone */
const HELLO_TIMEOUT_MS = 30_000;

const CHANNEL_SH = 'f="$1/helper-$2"; [ -x "$f" ] || exit 3; exec "$f" channel "$1"';
// the temporary name is the shell's pid: two replicas copying at once each rename a whole file
const UPLOAD_SH =
  'umask 077 && mkdir -p -- "$1" && t="$1/.upload.$$" && cat > "$t" && chmod 0700 "$t" && mv -f -- "$t" "$1/helper-$2"';

export interface HelperBinary {
  bytes: Buffer;
  sha256: string;
}

export async function loadHelperBinary(path: string): Promise<HelperBinary> {
  const bytes = await readFile(path);
  return { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
}

export type OpenOutcome = { channel: CommandChannel } | { fallback: string };

export interface OpenOptions {
  runInPod: RunInPod;
  helper: () => Promise<HelperBinary>;
  clock: Clock;
  /** default HELPER_DIR */
  dir?: string;
  helloTimeoutMs?: number;
  /** bounds the helper copies in flight (uploadSlots.ts); default unbounded */
  uploads?: UploadSlots;
}

export async function openPodChannel(o: OpenOptions, pod: string): Promise<OpenOutcome> {
  const dir = o.dir ?? HELPER_DIR;
  let helper: HelperBinary;
  try {
    helper = await o.helper();
  } catch (err) {
    return { fallback: `the helper binary is not available here: ${(err as Error).message}` };
  }
  const first = await tryChannel(o, pod, dir, helper.sha256);
  if (!("missing" in first)) return first;
  const upload = async () => {
    const copy = await o.runInPod(pod, ["sh", "-c", UPLOAD_SH, "sbx-upload", dir, helper.sha256], helper.bytes);
    copy.stdout.resume();
    // An upload the pod refuses early (its shell exits while the binary is still being sent)
    // can lose its exit status: the kubelet closes, the data still arriving draws a TCP reset,
    // and the reset discards the unread status. That is a failed copy, not a failed command.
    return Promise.all([head(copy.stderr), copy.result.catch((err: Error) => err)]);
  };
  const [why, res] = await (o.uploads ? o.uploads.run(upload) : upload());
  if (!(res instanceof Error) && res.exitCode !== 0)
    return { fallback: `copying the helper into ${dir} exited ${res.exitCode}: ${why}` };
  // after a lost status the copy may still have landed: the second try tells
  const second = await tryChannel(o, pod, dir, helper.sha256);
  if (!("missing" in second)) return second;
  return {
    fallback:
      res instanceof Error
        ? `copying the helper into ${dir} failed: ${res.message}`
        : `the helper copied into ${dir} is still not executable`,
  };
}

async function tryChannel(
  o: OpenOptions,
  pod: string,
  dir: string,
  sha: string,
): Promise<OpenOutcome | { missing: true }> {
  const input = new PassThrough();
  const session = await o.runInPod(pod, ["sh", "-c", CHANNEL_SH, "sbx-channel", dir, sha], input);
  // Frames made in one tick (a start and its end of stdin, ten callers' starts) leave as one
  // websocket message: each message costs a hop through the API server and the kubelet.
  // A bulk frame goes as it is: copying it into a batch would cost more than the message saves.
  let pending: Buffer[] = [];
  const flush = () => {
    if (!pending.length) return;
    const batch = pending.length === 1 ? pending[0] : Buffer.concat(pending);
    pending = [];
    input.write(batch);
  };
  const channel = new CommandChannel(
    {
      send: (b) => {
        if (b.length >= 16 * 1024) {
          flush();
          input.write(b);
        } else if (pending.push(b) === 1) queueMicrotask(flush);
      },
      output: session.stdout,
      close: () => {
        input.end();
        session.kill();
      },
    },
    pod,
    o.clock,
  );
  const stderr = head(session.stderr);
  const gaveUp = new AbortController();
  const timer = o.clock.sleep(o.helloTimeoutMs ?? HELLO_TIMEOUT_MS, gaveUp.signal).then(
    () => "timeout" as const,
    () => "cancelled" as const,
  );
  try {
    const first = await Promise.race([channel.hello.then(() => "hello" as const), timer]);
    if (first === "hello") return { channel };
    channel.close("no hello in time");
    return { fallback: `the channel sent no hello within ${o.helloTimeoutMs ?? HELLO_TIMEOUT_MS} ms` };
  } catch {
    const res: ExecResult | Error = await session.result.catch((e: Error) => e);
    if (res instanceof Error) return { fallback: `the channel exec failed: ${res.message}` };
    if (res.exitCode === MISSING) return { missing: true };
    return { fallback: `the channel exec exited ${res.exitCode}: ${await stderr}` };
  } finally {
    gaveUp.abort();
  }
}

/** the first 2 KiB of a stream, trimmed; the rest is read and dropped */
async function head(s: Readable): Promise<string> {
  let text = "";
  for await (const c of s) if (text.length < 2048) text += c.toString();
  return text.trim().slice(0, 2048) || "no message";
}
