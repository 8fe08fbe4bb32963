// Waiting for a promise with a timeout and an abort signal, leaving no timer or listener behind.
import type { WaitOptions } from "../core/types.ts";

/** Resolves when `p` does; rejects with timeoutError() after opts.timeoutMs, or with the signal's reason. */
export async function within(p: Promise<unknown>, opts: WaitOptions, timeoutError: () => Error): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timeoutError()), opts.timeoutMs);
    onAbort = () => reject(opts.signal!.reason ?? new Error("aborted"));
    opts.signal?.addEventListener("abort", onAbort, { once: true });
  });
  try {
    await Promise.race([p, stop]);
  } finally {
    clearTimeout(timer);
    if (onAbort) opts.signal?.removeEventListener("abort", onAbort);
  }
}
