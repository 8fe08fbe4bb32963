// Turning a caller's CreateRequest into a SandboxSpec: every bound checked, every error naming
// the field, the bad value and the fix. Pure apart from the random id for key-less creates.
import { createHash, randomBytes } from "node:crypto";
import { type AutoPauseInput, validateAutoPause } from "../autopause/spec.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import { ValidationError } from "./errors.ts";
import type { CreateRequest, ImageRef, SandboxSpec } from "./types.ts";

export const LIMITS = {
  envEntries: 128,
  envBytes: 64 * 1024,
  metadataEntries: 32,
  metadataValueChars: 256,
  clientKeyChars: 128,
  ownerChars: 128,
} as const;

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const META_KEY = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;
const CLIENT_KEY = /^[A-Za-z0-9._:-]+$/;
const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

function base32(bytes: Uint8Array, n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) out += ID_ALPHABET[bytes[i] % 32];
  return out;
}

/**
 * Sandbox ids are DNS-1123 labels (they name pods and custom resources). With a client key
 * the id is derived from (owner, key), so a retry, even after a restart or on another
 * replica, lands on the same id and the substrate itself refuses a duplicate.
 */
export function sandboxId(owner: string, clientKey?: string): string {
  const bytes =
    clientKey === undefined ? randomBytes(16) : createHash("sha256").update(`${owner}\0${clientKey}`).digest();
  return `sbx-${base32(bytes, 16)}`;
}

export function isSandboxId(id: string): boolean {
  return /^sbx-[a-z2-7]{16}$/.test(id);
}

function checkStringMap(
  field: string,
  map: unknown,
  keyRe: RegExp,
  keyFix: string,
  maxEntries: number,
): Record<string, string> {
  if (map === undefined) return {};
  if (!map || typeof map !== "object" || Array.isArray(map))
    throw new ValidationError(field, map, "must be an object of string values");
  const entries = Object.entries(map as Record<string, unknown>);
  if (entries.length > maxEntries)
    throw new ValidationError(field, `${entries.length} entries`, `at most ${maxEntries} entries`);
  for (const [k, v] of entries) {
    if (!keyRe.test(k)) throw new ValidationError(k === "" ? field : `${field}.${k}`, k, keyFix);
    if (typeof v !== "string") throw new ValidationError(`${field}.${k}`, v, "must be a string");
    // a NUL cannot cross into a process's environment or a Kubernetes object: accepted here, it
    // would fail every later exec, download and pause of the sandbox
    if (v.includes("\u0000")) throw new ValidationError(`${field}.${k}`, v, "must not contain NUL bytes (\\u0000)");
  }
  return { ...(map as Record<string, string>) };
}

export function validateOwner(owner: unknown): string {
  if (typeof owner !== "string" || owner.length === 0 || owner.length > LIMITS.ownerChars) {
    throw new ValidationError("owner", owner, `must be a non-empty string of at most ${LIMITS.ownerChars} characters`);
  }
  return owner;
}

/** Validate a create request into a spec. `resolveImage` is the catalog (throws for unknown profiles). */
// Over 60 lines on purpose: one check per request field in the order the docs list them; each is two or three lines.
export function resolveSpec(
  req: CreateRequest,
  cfg: Pick<RuntimeConfig, "sizeClasses" | "defaults">,
  resolveImage: (profile: string) => ImageRef,
  now: Date,
): SandboxSpec {
  const owner = validateOwner(req.owner);
  const profile = req.profile ?? cfg.defaults.profile;
  if (typeof profile !== "string") throw new ValidationError("profile", profile, "must be a string");
  const image = resolveImage(profile);
  const sizeName = req.size ?? cfg.defaults.size;
  const size =
    typeof sizeName === "string" && Object.hasOwn(cfg.sizeClasses, sizeName) ? cfg.sizeClasses[sizeName] : undefined;
  if (!size)
    throw new ValidationError(
      "size",
      sizeName,
      `unknown size class; use one of: ${Object.keys(cfg.sizeClasses).join(", ")}`,
    );

  const ttl = req.ttlSeconds ?? cfg.defaults.ttlSeconds;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > cfg.defaults.maxTtlSeconds) {
    throw new ValidationError(
      "ttlSeconds",
      ttl,
      `must be a whole number of seconds from 1 to ${cfg.defaults.maxTtlSeconds}`,
    );
  }
  const idle = req.idleTimeoutSeconds ?? cfg.defaults.idleTimeoutSeconds;
  if (!Number.isInteger(idle) || idle < 0 || idle > cfg.defaults.maxTtlSeconds) {
    throw new ValidationError(
      "idleTimeoutSeconds",
      idle,
      `must be a whole number of seconds from 0 (never) to ${cfg.defaults.maxTtlSeconds}`,
    );
  }
  const env = checkStringMap(
    "env",
    req.env,
    ENV_KEY,
    "environment variable names are letters, digits and '_', not starting with a digit",
    LIMITS.envEntries,
  );
  const envBytes = Object.entries(env).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v) + 2, 0);
  if (envBytes > LIMITS.envBytes)
    throw new ValidationError("env", `${envBytes} bytes`, `total size must be at most ${LIMITS.envBytes} bytes`);
  const metadata = checkStringMap(
    "metadata",
    req.metadata,
    META_KEY,
    "metadata keys are 1-63 letters, digits, '.', '_' or '-', starting and ending alphanumeric",
    LIMITS.metadataEntries,
  );
  for (const [k, v] of Object.entries(metadata)) {
    if (v.length > LIMITS.metadataValueChars)
      throw new ValidationError(
        `metadata.${k}`,
        `${v.slice(0, 20)}...`,
        `at most ${LIMITS.metadataValueChars} characters`,
      );
  }
  const clientKey = req.clientKey;
  if (
    clientKey !== undefined &&
    (typeof clientKey !== "string" || !CLIENT_KEY.test(clientKey) || clientKey.length > LIMITS.clientKeyChars)
  ) {
    throw new ValidationError(
      "clientKey",
      clientKey,
      `use 1-${LIMITS.clientKeyChars} characters from letters, digits, '.', '_', ':' and '-'`,
    );
  }
  if (req.autoPause !== undefined) {
    if (!req.autoPause || typeof req.autoPause !== "object" || Array.isArray(req.autoPause))
      throw new ValidationError(
        "autoPause",
        req.autoPause,
        "use an object with probes, pause, resume and timeout (docs/pause-resume.md)",
      );
    validateAutoPause(req.autoPause as AutoPauseInput, "autoPause");
  }
  return {
    id: sandboxId(owner, clientKey),
    owner,
    image,
    size,
    env,
    ttlSeconds: ttl,
    idleTimeoutSeconds: idle,
    clientKey,
    metadata,
    createdAt: now,
    ...(req.autoPause !== undefined ? { autoPause: structuredClone(req.autoPause) } : {}),
  };
}
