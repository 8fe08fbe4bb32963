// From a verified token's claims to who the caller is: the owner (one claim, with an optional
// prefix that keeps issuers' subjects apart) and the team (a claim whose value, or first array
// element, carrying a given prefix names the team without it). Pure: claims in, identity out.
import { showClaim, TokenRejectedError } from "./jwt.ts";

/** A top-level claim name, or a path into nested objects (["kubernetes.io", "namespace"]). */
export type ClaimPath = string | readonly string[];

export interface ClaimMapping {
  owner: { claim: ClaimPath; prefix: string };
  team?: { claim: ClaimPath; stripPrefix: string };
}

/** Who a request acts for, and how that was established. */
export interface Identity {
  owner: string;
  team?: string;
  /** "token" (the static tokens file) or the configured issuer's name */
  via: string;
  /** when the credential stops being accepted (JWTs) */
  expiresAt?: string;
}

/** Owners are names: printable, at most 128 characters (as in the tokens file). */
const MAX_OWNER = 128;
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

export function claimName(path: ClaimPath): string {
  return typeof path === "string" ? path : path.join(".");
}

export function claimAt(payload: Record<string, unknown>, path: ClaimPath): unknown {
  let v: unknown = payload;
  for (const key of typeof path === "string" ? [path] : path) {
    if (!v || typeof v !== "object" || Array.isArray(v) || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return v;
}

function usableName(v: string): boolean {
  return v.length > 0 && v.length <= MAX_OWNER && !CONTROL.test(v);
}

/** The identity the claims map to; throws missing_claim naming the claim when there is no owner. */
export function resolveIdentity(payload: Record<string, unknown>, mapping: ClaimMapping, via: string): Identity {
  const raw = claimAt(payload, mapping.owner.claim);
  const owner = typeof raw === "string" ? `${mapping.owner.prefix}${raw}` : undefined;
  if (owner === undefined || typeof raw !== "string" || raw.length === 0 || !usableName(owner))
    throw new TokenRejectedError(
      "missing_claim",
      `claim ${claimName(mapping.owner.claim)} (the owner, for issuer ${via}) is ${raw === undefined ? "missing" : `not a usable name: ${showClaim(raw)}`}`,
    );
  const exp = payload.exp;
  const identity: Identity = { owner, via };
  if (typeof exp === "number") identity.expiresAt = new Date(exp * 1000).toISOString();
  const team = mapping.team ? resolveTeam(claimAt(payload, mapping.team.claim), mapping.team.stripPrefix) : undefined;
  if (team !== undefined) identity.team = team;
  return identity;
}

/** The first value (in claim order) that starts with the prefix, without it; undefined if none. */
export function resolveTeam(value: unknown, stripPrefix: string): string | undefined {
  const values = typeof value === "string" ? [value] : Array.isArray(value) ? value : [];
  for (const v of values) {
    if (typeof v !== "string" || !v.startsWith(stripPrefix)) continue;
    const team = v.slice(stripPrefix.length);
    if (usableName(team)) return team;
  }
  return undefined;
}
