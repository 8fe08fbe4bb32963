// Bearer tokens -> owners. Only sha256 hashes are stored (a tokens file { "<sha256 hex>":
// "<owner>" }); a presented token is hashed and compared against every stored hash with
// crypto.timingSafeEqual, without an early exit, so response time says nothing about which
// prefix matched or whether any did.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { ValidationError } from "./errors.ts";

const HEX64 = /^[0-9a-f]{64}$/;

export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** A new random token: 32 bytes of entropy, URL-safe, prefixed so leaks are greppable. */
export function generateToken(): string {
  return `sbx_${randomBytes(32).toString("base64url")}`;
}

/** A key in E2B's shape, e2b_ and 40 hex digits (20 bytes), for agents whose tooling expects one. */
export function generateE2bKey(): string {
  return `e2b_${randomBytes(20).toString("hex")}`;
}

export function parseTokensFile(source: string, text: string): Map<string, string> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ValidationError(
      source,
      text.slice(0, 40),
      `must be JSON { "<sha256 hex of token>": "<owner>" }: ${(e as Error).message}`,
    );
  }
  if (!doc || typeof doc !== "object" || Array.isArray(doc))
    throw new ValidationError(source, doc, 'must be a JSON object { "<sha256 hex of token>": "<owner>" }');
  const out = new Map<string, string>();
  for (const [hash, owner] of Object.entries(doc)) {
    if (!HEX64.test(hash))
      throw new ValidationError(
        `${source} key`,
        `${hash.slice(0, 12)}...`,
        "keys are sha256 hex digests of tokens (64 lowercase hex characters); never store plain tokens",
      );
    if (typeof owner !== "string" || owner.length === 0 || owner.length > 128)
      throw new ValidationError(
        `${source}.${hash.slice(0, 12)}`,
        owner,
        "owner must be a non-empty string of at most 128 characters",
      );
    out.set(hash, owner);
  }
  return out;
}

export class TokenStore {
  private entries: { hash: Buffer; owner: string }[];

  /** `compare` is crypto.timingSafeEqual; injectable so a test can prove every entry is compared. */
  constructor(
    hashes: Map<string, string>,
    private readonly compare: (a: Buffer, b: Buffer) => boolean = timingSafeEqual,
  ) {
    this.entries = [...hashes].map(([h, owner]) => ({ hash: Buffer.from(h, "hex"), owner }));
  }

  static fromFile(path: string): TokenStore {
    return new TokenStore(parseTokensFile(path, readFileSync(path, "utf8")));
  }

  /** owner for a presented token, or undefined. Constant time in the token's content. */
  authenticate(token: string | undefined): string | undefined {
    if (typeof token !== "string" || token.length === 0 || token.length > 512) return undefined;
    const presented = createHash("sha256").update(token, "utf8").digest();
    let owner: string | undefined;
    for (const e of this.entries) {
      // every entry is compared; no early return on a match
      if (this.compare(presented, e.hash) && owner === undefined) owner = e.owner;
    }
    return owner;
  }

  get size(): number {
    return this.entries.length;
  }
}

/**
 * Add a token for `owner` to the tokens file (created 0600 if missing), atomically.
 * Returns the plain token; only its hash is written.
 */
export function addToken(path: string, owner: string, generate: () => string = generateToken): string {
  const current = existsSync(path) ? parseTokensFile(path, readFileSync(path, "utf8")) : new Map<string, string>();
  const token = generate();
  current.set(hashToken(token), owner);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(Object.fromEntries(current), null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
  return token;
}

/**
 * The tokens file as an authenticator that notices edits (`sbx token create` while the service
 * runs): it re-stats the file at most once a second and re-reads it when it changed, keeping
 * the last good tokens when the new content is invalid.
 */
export class TokenFile {
  private store: TokenStore;
  private checkedAt = 0;
  private stamp: string;

  constructor(
    readonly path: string,
    private readonly onError: (err: unknown) => void,
    private readonly now: () => number = Date.now,
  ) {
    this.store = TokenStore.fromFile(path);
    this.stamp = TokenFile.stampOf(path);
  }

  private static stampOf(path: string): string {
    const s = statSync(path);
    return `${s.mtimeMs}:${s.size}:${s.ino}`;
  }

  authenticate(token: string | undefined): string | undefined {
    const t = this.now();
    if (t - this.checkedAt >= 1000) {
      this.checkedAt = t;
      let stamp = this.stamp;
      try {
        stamp = TokenFile.stampOf(this.path);
        if (stamp !== this.stamp) this.store = TokenStore.fromFile(this.path);
      } catch (err) {
        this.onError(err);
      }
      // a bad version is reported once, not on every request until it is fixed
      this.stamp = stamp;
    }
    return this.store.authenticate(token);
  }

  get size(): number {
    return this.store.size;
  }
}
