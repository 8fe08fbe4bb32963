// Who a request acts for: the static tokens file, or a JWT from one of the configured issuers.
// A token shaped like a JWT whose iss is a configured issuer goes to that issuer alone; anything
// else is looked up among the static tokens, which never wait on an issuer. So a slow or broken
// issuer costs only its own tokens anything. Refusals are logged with the failed check and the
// issuer, never with the token.
import type { RuntimeConfig } from "../config/schema.ts";
import { UnauthenticatedError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Identity } from "./claims.ts";
import { type IssuerDeps, IssuerVerifier } from "./issuer.ts";
import { type DecodedJwt, decodeJwt, looksLikeJwt, showClaim, TokenRejectedError } from "./jwt.ts";

export type { Identity } from "./claims.ts";

/**
 * What the service authenticates with. `authenticate` is the static lookup every caller has had;
 * `identify`, when present, is the whole check (issuers too) and names the failed check.
 */
export interface Authenticator {
  authenticate(token: string | undefined): string | undefined;
  identify?(token: string | undefined): Promise<Identity>;
}

/** The caller's identity, or an UnauthenticatedError (a TokenRejectedError when a check is named). */
export async function identify(auth: Authenticator, token: string | undefined): Promise<Identity> {
  if (auth.identify) return auth.identify(token);
  const owner = auth.authenticate(token);
  if (owner === undefined) throw new UnauthenticatedError();
  return { owner, via: "token" };
}

/** The owner, or undefined for any refusal: for paths that try other credentials next (ports). */
export async function ownerOf(auth: Authenticator, token: string | undefined): Promise<string | undefined> {
  try {
    return (await identify(auth, token)).owner;
  } catch (err) {
    if (err instanceof UnauthenticatedError) return undefined;
    throw err;
  }
}

export class Identities implements Authenticator {
  private readonly byIssuer: Map<string, IssuerVerifier>;

  constructor(
    private readonly statics: { authenticate(token: string | undefined): string | undefined },
    readonly issuers: IssuerVerifier[],
    private readonly logger: Logger,
    /** the configured teams, when teams are: a token naming another one is refused (unknown_team) */
    private readonly teams?: ReadonlySet<string>,
  ) {
    this.byIssuer = new Map(issuers.map((v) => [v.config.issuer, v]));
  }

  /** Static tokens only (the synchronous check older callers use). */
  authenticate(token: string | undefined): string | undefined {
    return this.statics.authenticate(token);
  }

  private knownTeam(identity: Identity, issuer: string): Identity {
    if (identity.team !== undefined && this.teams && !this.teams.has(identity.team))
      throw unknownTeam(identity.team, issuer, this.teams);
    return identity;
  }

  async identify(token: string | undefined): Promise<Identity> {
    if (typeof token !== "string" || token.length === 0) throw new UnauthenticatedError();
    const jwt = looksLikeJwt(token) ? decodeQuietly(token) : undefined;
    const verifier = jwt ? this.byIssuer.get(jwt.payload.iss as string) : undefined;
    if (jwt && verifier) {
      try {
        return this.knownTeam(await verifier.verify(jwt), verifier.name);
      } catch (err) {
        if (err instanceof TokenRejectedError)
          this.logger.debug({ op: "auth", issuer: verifier.name, reason: err.reason }, "token refused");
        throw err;
      }
    }
    const owner = this.statics.authenticate(token);
    if (owner !== undefined) return { owner, via: "token" };
    if (jwt) {
      const known = [...this.byIssuer.keys()].join(", ") || "none";
      throw new TokenRejectedError(
        "wrong_issuer",
        `iss ${showClaim(jwt.payload.iss)} is not an issuer this service accepts (configured: ${known})`,
      );
    }
    throw new UnauthenticatedError();
  }

  /** Fetch every issuer's keys now (at start), so the first requests do not wait for them. */
  async warm(): Promise<void> {
    await Promise.all(this.issuers.map((v) => v.keys.refresh()));
  }
}

/**
 * With teams configured, a token whose team claim names none of them is refused: counting it
 * against the default team would let a misspelt or unmapped group escape its quotas unnoticed.
 */
function unknownTeam(team: string, issuer: string, teams: ReadonlySet<string>): TokenRejectedError {
  return new TokenRejectedError(
    "unknown_team",
    `the team claim of issuer ${issuer} names team ${JSON.stringify(team)}, which config.tenancy.teams does not define (defined: ${[...teams].join(", ") || "none"}); add the team, or change the issuer's team mapping`,
  );
}

function decodeQuietly(token: string): DecodedJwt | undefined {
  try {
    return decodeJwt(token);
  } catch {
    return undefined; // not one of ours: the static lookup decides
  }
}

/** The service's authenticator from config: the tokens file plus config.auth.issuers. */
export function buildIdentities(
  config: Pick<RuntimeConfig, "auth"> & Partial<Pick<RuntimeConfig, "tenancy">>,
  statics: { authenticate(token: string | undefined): string | undefined },
  deps: IssuerDeps,
): Identities {
  const issuers = config.auth.issuers.map(
    (cfg, i) => new IssuerVerifier({ ...cfg, audiences: cfg.audiences ?? [] }, deps, `config.auth.issuers.${i}`),
  );
  const t = config.tenancy;
  const teams = t?.enabled ? new Set([...Object.keys(t.teams), t.defaultTeam]) : undefined;
  return new Identities(statics, issuers, deps.logger, teams);
}
