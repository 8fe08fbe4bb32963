// Access tokens that already passed the hash check, per sandbox, so that envd's request path
// (every command and file call) does not hash the presented token again. An entry counts only
// while the sandbox's record still holds the hashes it was checked against: a connect that mints
// another token, or an id that now names another sandbox, changes them and the next request is
// checked in full. The presented bytes are compared with the remembered ones in constant time.
// The tokens live in this process's memory only (never written, never logged), as the API keys
// the tokens file's hashes are checked against do for the length of a request.
import { timingSafeEqual } from "node:crypto";

interface Verified {
  /** the stored hashes the token matched, joined: the entry is void once they differ */
  stored: string;
  token: Buffer;
}

/** Entries kept at most; past it the oldest goes (a sandbox that is used again re-enters). */
export const DEFAULT_MAX_VERIFIED = 4096;

export class VerifiedTokens {
  private readonly bySandbox = new Map<string, Verified>();

  constructor(private readonly max = DEFAULT_MAX_VERIFIED) {}

  /** True when `presented` is the token verified for this sandbox against these same hashes. */
  known(sandboxId: string, presented: string, stored: string): boolean {
    const v = this.bySandbox.get(sandboxId);
    if (!v || v.stored !== stored) return false;
    const b = Buffer.from(presented, "utf8");
    return b.length === v.token.length && timingSafeEqual(b, v.token);
  }

  remember(sandboxId: string, presented: string, stored: string): void {
    this.bySandbox.delete(sandboxId); // re-inserted last: the oldest entry is the first key
    this.bySandbox.set(sandboxId, { stored, token: Buffer.from(presented, "utf8") });
    if (this.bySandbox.size > this.max) this.bySandbox.delete(this.bySandbox.keys().next().value!);
  }

  forget(sandboxId: string): void {
    this.bySandbox.delete(sandboxId);
  }

  get size(): number {
    return this.bySandbox.size;
  }
}
