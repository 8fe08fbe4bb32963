// One issuer's signing keys: discovery document and JWKS fetched, parsed into KeyObjects, cached.
// A token whose kid is cached is checked without any I/O. An unknown kid (rotation) starts one
// fetch, shared by every request that waits for it, and not another until minRefetchMs has passed:
// a stream of tokens with invented kids costs one fetch per interval, not one per request. A failed
// fetch is remembered and retried with exponential backoff, so a broken issuer answers its own
// tokens at once with issuer_unavailable instead of making each of them wait for a timeout. The
// cache is per issuer: nothing here is shared with another issuer or with static tokens.
import { createPublicKey, type JsonWebKey, type KeyObject } from "node:crypto";
import { TokenRejectedError } from "./jwt.ts";

export interface KeyTiming {
  /** after a fetch, the earliest next one an unknown kid may start (default 30 s) */
  minRefetchMs: number;
  /** keys older than this are refreshed in the background while still used (default 1 h) */
  refreshMs: number;
  /** first retry delay after a failed fetch, doubled per failure up to backoffMaxMs */
  backoffBaseMs: number;
  backoffMaxMs: number;
}

export const DEFAULT_KEY_TIMING: KeyTiming = {
  minRefetchMs: 30_000,
  refreshMs: 3_600_000,
  backoffBaseMs: 2_000,
  backoffMaxMs: 300_000,
};

/** Most keys one JWKS may hold; real ones have a handful. */
const MAX_KEYS = 100;

export interface KeySource {
  /** the configured issuer's name, for messages */
  name: string;
  /** the iss the discovery document must declare */
  issuer: string;
  discoveryUrl: string;
  /** set: skip discovery and fetch the keys here */
  jwksUrl?: string;
  /** GET a URL as JSON within the issuer's limits (fetch.ts, bound to its CA and bearer) */
  get(url: string): Promise<unknown>;
  /** why a jwks_uri from discovery may not be fetched (https rule), or undefined when it may */
  refuseUrl(url: string): string | undefined;
}

interface CachedKey {
  key: KeyObject;
  alg?: string;
}

export class IssuerKeys {
  private byKid = new Map<string, CachedKey>();
  private all: CachedKey[] = [];
  private jwksUri: string | undefined;
  private loadedAt: number | undefined;
  private attemptAt: number | undefined;
  private failures = 0;
  private retryAt = 0;
  private lastError = "";
  private inflight: Promise<void> | undefined;
  /** fetches of the JWKS started so far (tests count them) */
  fetches = 0;

  constructor(
    private readonly source: KeySource,
    private readonly now: () => number,
    private readonly timing: KeyTiming = DEFAULT_KEY_TIMING,
    private readonly onFailure: (message: string) => void = () => {},
  ) {}

  /** The key for a token's kid (or the only key, for a token without one). */
  async key(kid: string | undefined): Promise<CachedKey> {
    const cached = this.lookup(kid);
    if (cached) {
      this.refreshIfStale();
      return cached;
    }
    await this.fetchForUnknown();
    const found = this.lookup(kid);
    if (found) return found;
    if (this.loadedAt === undefined)
      throw new TokenRejectedError(
        "issuer_unavailable",
        `the keys of issuer ${this.source.name} could not be fetched (${this.lastError}); the next try is in ${Math.max(0, Math.ceil((this.retryAt - this.now()) / 1000))} s`,
        { issuer: this.source.name },
      );
    throw new TokenRejectedError(
      "unknown_key",
      kid === undefined
        ? `it has no kid and issuer ${this.source.name} has ${this.all.length} keys`
        : `kid ${JSON.stringify(kid.slice(0, 64))} is not among issuer ${this.source.name}'s keys`,
      { issuer: this.source.name },
    );
  }

  /** Fetch now unless a fetch runs (then wait for it); for start-up warming and tests. */
  refresh(): Promise<void> {
    this.inflight ??= this.load().finally(() => {
      this.inflight = undefined;
    });
    return this.inflight;
  }

  private lookup(kid: string | undefined): CachedKey | undefined {
    if (kid !== undefined) return this.byKid.get(kid);
    return this.all.length === 1 ? this.all[0] : undefined;
  }

  private fetchForUnknown(): Promise<void> {
    if (this.inflight) return this.inflight;
    const now = this.now();
    if (now < this.retryAt) return Promise.resolve();
    if (this.loadedAt !== undefined && this.attemptAt !== undefined && now - this.attemptAt < this.timing.minRefetchMs)
      return Promise.resolve();
    return this.refresh();
  }

  private refreshIfStale(): void {
    const now = this.now();
    if (this.inflight || this.loadedAt === undefined || now - this.loadedAt < this.timing.refreshMs) return;
    if (now < this.retryAt) return;
    void this.refresh();
  }

  /** One attempt; never rejects: a failure is recorded (and reported) for the backoff. */
  private async load(): Promise<void> {
    this.attemptAt = this.now();
    try {
      if (!this.source.jwksUrl && !this.jwksUri) this.jwksUri = await this.discover();
      const uri = this.source.jwksUrl ?? this.jwksUri!;
      this.fetches++;
      const keys = parseJwks(await this.source.get(uri));
      this.byKid = new Map(keys.filter((k) => k.kid !== undefined).map((k) => [k.kid!, k]));
      this.all = keys;
      this.loadedAt = this.now();
      this.failures = 0;
      this.retryAt = 0;
    } catch (err) {
      this.jwksUri = undefined; // discover again next time: the jwks_uri may have moved
      this.failures++;
      const delay = Math.min(this.timing.backoffMaxMs, this.timing.backoffBaseMs * 2 ** (this.failures - 1));
      this.retryAt = this.now() + delay;
      this.lastError = (err as Error).message;
      this.onFailure(this.lastError);
    }
  }

  private async discover(): Promise<string> {
    const doc = (await this.source.get(this.source.discoveryUrl)) as Record<string, unknown> | null;
    if (!doc || typeof doc !== "object") throw new Error(`${this.source.discoveryUrl}: not a discovery document`);
    if (doc.issuer !== this.source.issuer)
      throw new Error(
        `${this.source.discoveryUrl} declares issuer ${JSON.stringify(doc.issuer)}, not ${this.source.issuer}: set issuer to what it declares`,
      );
    if (typeof doc.jwks_uri !== "string") throw new Error(`${this.source.discoveryUrl} has no jwks_uri`);
    const refused = this.source.refuseUrl(doc.jwks_uri);
    if (refused) throw new Error(`its jwks_uri ${doc.jwks_uri}: ${refused}`);
    return doc.jwks_uri;
  }
}

/** The usable signature keys of a JWKS document; throws when it is not one or has none. */
export function parseJwks(doc: unknown): (CachedKey & { kid?: string })[] {
  const keys = (doc as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys)) throw new Error("the answer is not a JWKS (no keys array)");
  if (keys.length > MAX_KEYS) throw new Error(`the JWKS holds ${keys.length} keys, over the limit of ${MAX_KEYS}`);
  const out: (CachedKey & { kid?: string })[] = [];
  for (const jwk of keys as (JsonWebKey & { kid?: unknown; alg?: unknown; use?: unknown })[]) {
    // symmetric keys never: a shared secret in a public document would let anyone sign
    if (!jwk || typeof jwk !== "object" || jwk.kty === "oct" || (jwk.use !== undefined && jwk.use !== "sig")) continue;
    let key: KeyObject;
    try {
      key = createPublicKey({ key: jwk, format: "jwk" });
    } catch {
      continue; // a key type this node cannot read is skipped, as the spec asks
    }
    out.push({
      key,
      kid: typeof jwk.kid === "string" ? jwk.kid : undefined,
      alg: typeof jwk.alg === "string" ? jwk.alg : undefined,
    });
  }
  if (out.length === 0) throw new Error("the JWKS holds no usable signature key");
  return out;
}
