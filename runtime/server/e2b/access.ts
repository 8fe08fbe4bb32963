// The contract between the E2B layer's two halves: the control-plane REST routes (plugin.ts, which
// mint per-sandbox access tokens) and the envd routes (envd/**, which only check them). Kept tiny
// so either side can change without the other noticing.
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyReply } from "fastify";
import type { Logger } from "../../core/log.ts";
import type { Manager } from "../../core/types.ts";

/** Who an authorised envd request acts for: the sandbox's owner, on that sandbox. */
export interface EnvdCaller {
  owner: string;
  sandboxId: string;
}

export interface EnvdAccess {
  /**
   * Resolve an envd request: sandbox id from E2b-Sandbox-Id (or the 49983-<id>.<domain> host),
   * authorised only by X-Access-Token, checked against the sandbox's hashed token in constant time.
   * undefined => the caller gets E2B's 401/404 shape (the same answer for a missing sandbox and a
   * wrong token, so an id alone reveals nothing).
   */
  resolve(sandboxId: string, accessToken: string | undefined): Promise<EnvdCaller | undefined>;
}

/**
 * The envd version create/connect report. The SDK gates features on it (src/envd/versions.ts):
 * 0.4.0 default user (no Basic auth), 0.5.2 closeStdin, 0.5.7 octet-stream uploads. 0.6.2 (file
 * metadata headers) and 0.6.3 (watch events with entry info) stay locked until envd serves them.
 */
export const ENVD_VERSION = "0.5.7";

/** E2B's error body: the SDK branches on the numeric `code` (404 kill -> false, 409 pause -> false). */
export interface E2bErrorBody {
  code: number;
  message: string;
}

export function e2bError(reply: FastifyReply, status: number, message: string): FastifyReply {
  const body: E2bErrorBody = { code: status, message };
  return reply.code(status).type("application/json").send(body);
}

/** sha256 hex of an access token: the only form of it that is ever stored. */
export function hashAccessToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** Constant-time check of a presented token against a stored sha256 hex (false on any malformation). */
export function accessTokenMatches(presented: string | undefined, storedHash: string | undefined): boolean {
  if (typeof presented !== "string" || presented.length === 0 || presented.length > 512) return false;
  if (typeof storedHash !== "string" || !/^[0-9a-f]{64}$/.test(storedHash)) return false;
  // both sides are 32-byte digests, so timingSafeEqual never throws on a length mismatch
  return timingSafeEqual(Buffer.from(hashAccessToken(presented), "hex"), Buffer.from(storedHash, "hex"));
}

/** What registerE2b (plugin.ts) hands to registerEnvd (envd/plugin.ts). */
export interface E2bDeps {
  manager: Manager;
  access: EnvdAccess;
  logger: Logger;
}
