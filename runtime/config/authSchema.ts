// The `auth` section of the runtime config: JWT issuers whose tokens the service accepts besides
// the static tokens file (docs/identity.md). Its own file so schema.ts holds one line of it; pure,
// as schema.ts is, because the Pulumi package validates the config it renders with it.
import { z } from "zod";

/** Asymmetric algorithms only: `none` and HS* (a shared secret, forgeable with a public key) never. */
export const JWT_ALGORITHMS = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
] as const;

const LOOPBACK = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])$/i;

/**
 * Why a URL an issuer's keys come from may not be used, or undefined when it may: https always,
 * plain http only on a loopback host and only with allowInsecureHttp (the tests' issuer).
 */
export function refuseIssuerUrl(url: string, allowInsecureHttp: boolean): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "is not a URL: use https://host[/path]";
  }
  if (u.username || u.password) return "must not carry credentials; use tokenFile for a bearer token";
  if (u.hash) return "must not have a #fragment";
  if (u.protocol === "https:") return undefined;
  if (u.protocol === "http:" && allowInsecureHttp && LOOPBACK.test(u.hostname)) return undefined;
  if (u.protocol === "http:" && allowInsecureHttp)
    return "plain http is allowed only on a loopback host (tests); use https";
  return "must be https (allowInsecureHttp: true admits http on a loopback host, for tests only)";
}

const claimPath = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

export const issuerInput = z
  .object({
    /** names the issuer in logs, in errors and in an identity's `via` */
    name: z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, {
      message: "use lowercase letters, digits and '-' (at most 63)",
    }),
    /** the exact `iss` its tokens carry; discovery is fetched from <issuer>/.well-known/openid-configuration */
    issuer: z.string().min(1),
    /** accepted `aud` values: a token must name one (required: without it any token the issuer signs would do) */
    audiences: z.array(z.string().min(1)).optional(),
    /** where discovery is fetched when not at the issuer (an API server reached by its address) */
    discoveryUrl: z.string().optional(),
    /** fetch the keys here and skip discovery */
    jwksUrl: z.string().optional(),
    algorithms: z
      .array(z.enum(JWT_ALGORITHMS, { message: `use ${JWT_ALGORITHMS.join(", ")}: none and HS* are never accepted` }))
      .min(1)
      .default(["RS256", "ES256"]),
    /** PEM file of the CA that signs the issuer's TLS certificate (default: the system's) */
    caFile: z.string().min(1).optional(),
    /** file holding a bearer token for discovery and JWKS (a Kubernetes API server); read at each fetch */
    tokenFile: z.string().min(1).optional(),
    /** admit http:// on a loopback host: the tests' own issuer */
    allowInsecureHttp: z.boolean().default(false),
    /** tolerated clock difference for exp, nbf and iat */
    clockSkewSeconds: z.number().int().min(0).max(300).default(60),
    /** bounds of one discovery or JWKS fetch */
    fetchTimeoutMs: z.number().int().min(100).max(60_000).default(5000),
    maxBytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(1024 * 1024),
    /** the claim that names the owner, and a prefix put before it (keeps issuers' subjects apart) */
    owner: z
      .object({ claim: claimPath.default("sub"), prefix: z.string().max(64).default("") })
      .strict()
      .default({ claim: "sub", prefix: "" }),
    /** the claim that names the team: its first value starting with stripPrefix, without it */
    team: z
      .object({ claim: claimPath, stripPrefix: z.string().max(64).default("") })
      .strict()
      .optional(),
  })
  .strict();

export type IssuerConfig = Omit<z.output<typeof issuerInput>, "audiences"> & { audiences: string[] };

type Ctx = z.RefinementCtx;

function checkIssuer(i: z.output<typeof issuerInput>, at: number, ctx: Ctx): void {
  const issue = (field: string, message: string) =>
    ctx.addIssue({ code: "custom", path: ["issuers", at, field], message });
  if (!i.audiences || i.audiences.length === 0)
    issue(
      "audiences",
      'an issuer needs at least one audience, the aud its tokens must carry for this service (e.g. ["sbx"]); without one any token it signs for anything would be accepted',
    );
  for (const field of ["issuer", "discoveryUrl", "jwksUrl"] as const) {
    const url = i[field];
    const refused = url === undefined ? undefined : refuseIssuerUrl(url, i.allowInsecureHttp);
    if (refused) issue(field, refused);
  }
  if (i.discoveryUrl && i.jwksUrl) issue("jwksUrl", "set discoveryUrl or jwksUrl, not both (jwksUrl skips discovery)");
}

export const authConfigInput = z
  .object({ issuers: z.array(issuerInput).max(32).default([]) })
  .strict()
  .superRefine((a, ctx) => {
    const names = new Set<string>();
    const iss = new Set<string>();
    a.issuers.forEach((i, at) => {
      checkIssuer(i, at, ctx);
      if (names.has(i.name))
        ctx.addIssue({ code: "custom", path: ["issuers", at, "name"], message: "another issuer has this name" });
      if (iss.has(i.issuer))
        ctx.addIssue({
          code: "custom",
          path: ["issuers", at, "issuer"],
          message: "another entry has this issuer; list its audiences in one entry",
        });
      names.add(i.name);
      iss.add(i.issuer);
    });
  })
  .default({ issuers: [] });
