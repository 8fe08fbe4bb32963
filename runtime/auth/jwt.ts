// JWTs as this service checks them, with nothing but node:crypto: split a compact JWS, check the
// algorithm against an issuer's allowlist and the key's type, verify the signature, then the
// registered claims (iss, aud, exp, nbf, iat) with a small clock skew. Pure: keys and the time are
// arguments. Every refusal is a TokenRejectedError whose reason says which check failed; no message
// ever carries the token (only claim values an issuer put there, cut short).
import { constants, type KeyObject, verify } from "node:crypto";
import { JWT_ALGORITHMS } from "../config/authSchema.ts";
import { UnauthenticatedError } from "../core/errors.ts";

/** The checks a token can fail, as the 401's details.reason names them. */
export type RejectReason =
  | "malformed"
  | "algorithm_not_allowed"
  | "wrong_issuer"
  | "unknown_key"
  | "bad_signature"
  | "expired"
  | "not_yet_valid"
  | "wrong_audience"
  | "missing_claim"
  | "unknown_team"
  | "issuer_unavailable";

/** A 401 that names the failed check; the token itself is never in it. */
export class TokenRejectedError extends UnauthenticatedError {
  readonly reason: RejectReason;
  constructor(reason: RejectReason, message: string, details: Record<string, unknown> = {}) {
    super(`token rejected (${reason}): ${message}`);
    this.reason = reason;
    Object.assign(this.details, { reason, ...details });
  }
}

export { JWT_ALGORITHMS };
export type JwtAlgorithm = (typeof JWT_ALGORITHMS)[number];

/** Longest token looked at: Kubernetes' are ~1 KiB, an IdP's with many groups a few KiB. */
export const MAX_JWT_CHARS = 16 * 1024;

export interface DecodedJwt {
  header: { alg: string; kid?: string; typ?: string };
  payload: Record<string, unknown>;
  signingInput: string;
  signature: Buffer;
}

const B64URL = /^[A-Za-z0-9_-]*$/;

/** Three base64url parts, the first a header: the cheap test that routes a token to the issuers. */
export function looksLikeJwt(token: string): boolean {
  if (token.length > MAX_JWT_CHARS || token.length < 10 || !token.startsWith("eyJ")) return false;
  const first = token.indexOf(".");
  return first > 0 && token.indexOf(".", first + 1) > first && token.split(".").length === 3;
}

function part(text: string, what: string): Record<string, unknown> {
  if (!B64URL.test(text)) throw new TokenRejectedError("malformed", `its ${what} is not base64url`);
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(text, "base64url").toString("utf8"));
  } catch {
    throw new TokenRejectedError("malformed", `its ${what} is not JSON`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v))
    throw new TokenRejectedError("malformed", `its ${what} is not a JSON object`);
  return v as Record<string, unknown>;
}

export function decodeJwt(token: string): DecodedJwt {
  if (token.length > MAX_JWT_CHARS) throw new TokenRejectedError("malformed", `it is over ${MAX_JWT_CHARS} characters`);
  const parts = token.split(".");
  if (parts.length !== 3) throw new TokenRejectedError("malformed", "a JWT has three dot-separated parts");
  const header = part(parts[0], "header");
  const payload = part(parts[1], "payload");
  if (typeof header.alg !== "string") throw new TokenRejectedError("malformed", "its header has no alg");
  if (header.kid !== undefined && typeof header.kid !== "string")
    throw new TokenRejectedError("malformed", "its header's kid is not a string");
  if (!B64URL.test(parts[2])) throw new TokenRejectedError("malformed", "its signature is not base64url");
  return {
    header: header as DecodedJwt["header"],
    payload,
    signingInput: `${parts[0]}.${parts[1]}`,
    signature: Buffer.from(parts[2], "base64url"),
  };
}

/** A claim value as it may appear in a message: short, and never a token-sized blob. */
export function showClaim(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 80)}...` : s;
}

export function checkAlgorithm(alg: string, allowed: readonly string[], issuer: string): JwtAlgorithm {
  if (!allowed.includes(alg) || !(JWT_ALGORITHMS as readonly string[]).includes(alg))
    throw new TokenRejectedError(
      "algorithm_not_allowed",
      `alg ${showClaim(alg)} is not allowed for issuer ${issuer} (allowed: ${allowed.join(", ")})`,
      { alg: showClaim(alg) },
    );
  return alg as JwtAlgorithm;
}

const HASH: Record<string, string> = { "256": "sha256", "384": "sha384", "512": "sha512" };
const CURVE: Record<string, string> = { ES256: "prime256v1", ES384: "secp384r1", ES512: "secp521r1" };

/** Whether the key is the kind the algorithm needs: an RSA key never verifies an ES256 token, etc. */
export function keyFits(alg: JwtAlgorithm, key: KeyObject): boolean {
  if (key.type !== "public") return false;
  const kind = key.asymmetricKeyType;
  if (alg.startsWith("RS")) return kind === "rsa";
  if (alg.startsWith("PS")) return kind === "rsa" || kind === "rsa-pss";
  if (alg.startsWith("ES")) return kind === "ec" && key.asymmetricKeyDetails?.namedCurve === CURVE[alg];
  return kind === "ed25519" || kind === "ed448";
}

export function verifySignature(jwt: DecodedJwt, alg: JwtAlgorithm, key: KeyObject): boolean {
  if (!keyFits(alg, key)) return false;
  const data = Buffer.from(jwt.signingInput, "ascii");
  if (alg === "EdDSA") return verify(null, data, key, jwt.signature);
  const hash = HASH[alg.slice(2)];
  if (alg.startsWith("ES")) return verify(hash, data, { key, dsaEncoding: "ieee-p1363" }, jwt.signature);
  if (alg.startsWith("PS"))
    return verify(
      hash,
      data,
      { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST },
      jwt.signature,
    );
  return verify(hash, data, key, jwt.signature);
}

export interface ClaimRules {
  issuer: string;
  audiences: readonly string[];
  skewSeconds: number;
}

function numericDate(payload: Record<string, unknown>, name: string): number | undefined {
  const v = payload[name];
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new TokenRejectedError("malformed", `its ${name} is not a NumericDate (seconds since the epoch)`);
  return v;
}

const iso = (seconds: number) => new Date(seconds * 1000).toISOString();

/** iss, aud, exp, nbf and iat against the rules at `nowMs`; throws the first that fails. */
export function checkClaims(payload: Record<string, unknown>, rules: ClaimRules, nowMs: number): void {
  if (payload.iss !== rules.issuer)
    throw new TokenRejectedError("wrong_issuer", `iss ${showClaim(payload.iss)} is not ${rules.issuer}`);
  const now = nowMs / 1000;
  const skew = rules.skewSeconds;
  const exp = numericDate(payload, "exp");
  if (exp === undefined)
    throw new TokenRejectedError("missing_claim", "it has no exp: only tokens that expire are accepted");
  if (now - skew >= exp)
    throw new TokenRejectedError("expired", `it expired at ${iso(exp)} (now ${iso(now)}, skew ${skew} s)`, {
      exp,
    });
  const nbf = numericDate(payload, "nbf");
  if (nbf !== undefined && now + skew < nbf)
    throw new TokenRejectedError("not_yet_valid", `it is not valid before ${iso(nbf)} (now ${iso(now)})`, { nbf });
  const iat = numericDate(payload, "iat");
  if (iat !== undefined && now + skew < iat)
    throw new TokenRejectedError("not_yet_valid", `it was issued in the future, at ${iso(iat)} (now ${iso(now)})`, {
      iat,
    });
  const aud = payload.aud;
  const presented = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud : [];
  if (!presented.some((a) => typeof a === "string" && rules.audiences.includes(a)))
    throw new TokenRejectedError(
      "wrong_audience",
      `aud ${showClaim(aud)} names none of ${rules.audiences.join(", ")}: request a token for one of them`,
    );
}
