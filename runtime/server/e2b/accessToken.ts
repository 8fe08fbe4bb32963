// Per-sandbox envd access tokens. A token is derived, HMAC-SHA256, from the caller's API key and a
// random per-sandbox nonce kept in the sandbox's reserved metadata; only the token's sha256 is
// stored beside it. So connect can hand the same token out again (E2B's connect returns it) on any
// replica and after any restart, while nothing stored lets anyone rebuild it: that takes the key.
// The token also names its owner (base64url) before the secret part, so an envd request, which
// carries only a sandbox id and this token, finds the sandbox through the Manager's owner-scoped
// lookup without a cross-owner index. Naming the owner gives nothing away: the token goes to that
// owner alone, and without the secret part the hash never matches.
import { createHmac, randomBytes } from "node:crypto";
import { hashAccessToken } from "./access.ts";

const PREFIX = "sbxat_";
/** binds the HMAC to this use of the key: no other message signed with an API key can collide */
const CONTEXT = "sbx e2b envd access token v1\0";

export interface MintedToken {
  token: string;
  hash: string;
}

export function newNonce(): string {
  return randomBytes(18).toString("base64url");
}

export function deriveAccessToken(owner: string, apiKey: string, nonce: string): MintedToken {
  const secret = createHmac("sha256", apiKey)
    .update(CONTEXT + nonce, "utf8")
    .digest("base64url");
  const token = `${PREFIX}${Buffer.from(owner, "utf8").toString("base64url")}.${secret}`;
  return { token, hash: hashAccessToken(token) };
}

/** The owner a token claims, or undefined when it is not one of ours (then nothing is looked up). */
export function tokenOwner(token: string | undefined): string | undefined {
  if (typeof token !== "string" || !token.startsWith(PREFIX) || token.length > 512) return undefined;
  const dot = token.indexOf(".", PREFIX.length);
  if (dot < 0) return undefined;
  const owner = Buffer.from(token.slice(PREFIX.length, dot), "base64url").toString("utf8");
  return owner.length > 0 ? owner : undefined;
}
