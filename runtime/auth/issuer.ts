// One configured issuer: its key cache (keys.ts), wired to a bounded fetch with its CA and bearer
// file, and the checks a token of its must pass, in an order that spends nothing on a token that
// fails a cheap check: algorithm (before any fetch: an HS256 or `none` token never costs one), key,
// signature, then the claims. The claims are read only from a token whose signature verified.
import { readFileSync } from "node:fs";
import { type IssuerConfig, refuseIssuerUrl } from "../config/authSchema.ts";
import { ValidationError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { type Identity, resolveIdentity } from "./claims.ts";
import { fetchJson, type JsonFetcher } from "./fetch.ts";
import { checkAlgorithm, checkClaims, type DecodedJwt, TokenRejectedError, verifySignature } from "./jwt.ts";
import { DEFAULT_KEY_TIMING, IssuerKeys, type KeyTiming } from "./keys.ts";

export interface IssuerDeps {
  /** milliseconds since the epoch (a Clock's now) */
  now: () => number;
  logger: Logger;
  /** default: fetch.ts over node:http(s) */
  fetch?: JsonFetcher;
  timing?: Partial<KeyTiming>;
}

export function discoveryUrlOf(cfg: IssuerConfig): string {
  return cfg.discoveryUrl ?? `${cfg.issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;
}

function readCa(cfg: IssuerConfig, at: string): string | undefined {
  if (!cfg.caFile) return undefined;
  try {
    return readFileSync(cfg.caFile, "utf8");
  } catch (err) {
    throw new ValidationError(
      `${at}.caFile`,
      cfg.caFile,
      `cannot read it (${(err as Error).message}): mount the CA's PEM there`,
    );
  }
}

export class IssuerVerifier {
  readonly name: string;
  readonly keys: IssuerKeys;

  constructor(
    readonly config: IssuerConfig,
    private readonly deps: IssuerDeps,
    at = `config.auth.issuers.${config.name}`,
  ) {
    this.name = config.name;
    const ca = readCa(config, at);
    const get = deps.fetch ?? fetchJson;
    // the bearer token goes only where config points, never to a host a discovery document names
    const trusted = new Set([
      new URL(discoveryUrlOf(config)).origin,
      ...(config.jwksUrl ? [new URL(config.jwksUrl).origin] : []),
    ]);
    const log = deps.logger.child({ op: "auth", issuer: config.name });
    this.keys = new IssuerKeys(
      {
        name: config.name,
        issuer: config.issuer,
        discoveryUrl: discoveryUrlOf(config),
        jwksUrl: config.jwksUrl,
        refuseUrl: (url) => refuseIssuerUrl(url, config.allowInsecureHttp),
        get: (url) =>
          get(url, {
            ca,
            bearer:
              config.tokenFile && trusted.has(new URL(url).origin)
                ? readFileSync(config.tokenFile, "utf8").trim()
                : undefined,
            timeoutMs: config.fetchTimeoutMs,
            maxBytes: config.maxBytes,
          }),
      },
      deps.now,
      { ...DEFAULT_KEY_TIMING, ...deps.timing },
      (message) =>
        log.warn({ err: message }, "issuer keys could not be fetched; its tokens are refused until they are"),
    );
  }

  /** The identity a decoded token of this issuer maps to; throws TokenRejectedError naming the failed check. */
  async verify(jwt: DecodedJwt): Promise<Identity> {
    const alg = checkAlgorithm(jwt.header.alg, this.config.algorithms, this.name);
    const { key, alg: keyAlg } = await this.keys.key(jwt.header.kid);
    const kid = jwt.header.kid === undefined ? "(no kid)" : JSON.stringify(jwt.header.kid.slice(0, 64));
    if (keyAlg !== undefined && keyAlg !== alg)
      throw new TokenRejectedError(
        "algorithm_not_allowed",
        `key ${kid} of issuer ${this.name} is for ${keyAlg}, the token says ${alg}`,
      );
    if (!verifySignature(jwt, alg, key))
      throw new TokenRejectedError(
        "bad_signature",
        `its ${alg} signature does not verify with key ${kid} of issuer ${this.name}`,
      );
    checkClaims(
      jwt.payload,
      { issuer: this.config.issuer, audiences: this.config.audiences, skewSeconds: this.config.clockSkewSeconds },
      this.deps.now(),
    );
    return resolveIdentity(jwt.payload, this.config, this.name);
  }
}
