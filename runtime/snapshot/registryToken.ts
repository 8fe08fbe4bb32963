// The runtime as the token issuer of its own snapshot registry (distribution's `auth: token`):
// it signs short-lived ES256 JWTs with a key whose certificate is the registry's rootcertbundle,
// so it needs no token service. Two kinds of token:
//   - the replica's own (issuerAuth): whatever a challenge asks for, within the snapshot
//     repository and the repositories under it;
//   - a sandbox's (sandboxToken): pull and push on `<repository>/<sandbox id>` alone, handed to
//     the pod's helper on stdin (podLayers.ts), never in argv or the pod spec. A sandbox that
//     reaches the registry can then read and write only its own layers.
// The certificate is self-signed; tokenKeyPair() makes one (`sbx registry-token-key`, the test
// cluster's registry). The JWT carries it in its x5c header, which the registry checks against
// its bundle.
import { createPrivateKey, generateKeyPairSync, type KeyObject, randomBytes, sign, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Clock } from "../core/clock.ts";
import { ValidationError } from "../core/errors.ts";
import type { RegistryAuth } from "./auth.ts";

export type RegistryAction = "pull" | "push" | "delete";

export interface RegistryAccess {
  name: string;
  actions: RegistryAction[];
}

export interface TokenIssuerOptions {
  /** PEM, an EC P-256 private key */
  keyPem: string;
  /** PEM, the self-signed certificate of that key: the registry's rootcertbundle */
  certPem: string;
  /** the registry's auth.token.issuer */
  issuer: string;
  /** the registry's auth.token.service: the token's audience */
  service: string;
  ttlSeconds: number;
  clock: Clock;
}

export interface TokenIssuer {
  readonly ttlSeconds: number;
  /** a signed JWT granting `access` to `subject` until now + ttl */
  mint(subject: string, access: RegistryAccess[]): string;
}

export function tokenIssuer(o: TokenIssuerOptions): TokenIssuer {
  const key = createPrivateKey(o.keyPem);
  const cert = new X509Certificate(o.certPem);
  const header = b64url(JSON.stringify({ typ: "JWT", alg: "ES256", x5c: [cert.raw.toString("base64")] }));
  return {
    ttlSeconds: o.ttlSeconds,
    mint(subject, access) {
      const now = Math.floor(o.clock.now().getTime() / 1000);
      const claims = {
        iss: o.issuer,
        sub: subject,
        aud: o.service,
        iat: now,
        nbf: now - 30, // the registry's clock may run a little behind ours
        exp: now + o.ttlSeconds,
        jti: randomBytes(12).toString("hex"),
        access: access.map((a) => ({ type: "repository", name: a.name, actions: a.actions })),
      };
      const input = `${header}.${b64url(JSON.stringify(claims))}`;
      const sig = sign("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" });
      return `${input}.${b64url(sig)}`;
    },
  };
}

/** Where a sandbox's own layers live: a repository under the snapshot repository. */
export function sandboxRepository(repository: string, sandboxId: string): string {
  return `${repository}/${sandboxId}`;
}

/** The Authorization value a sandbox's helper gets: its own repository, pull and push. */
export function sandboxToken(issuer: TokenIssuer, repository: string, sandboxId: string): string {
  return `Bearer ${issuer.mint(`sandbox:${sandboxId}`, [
    { name: sandboxRepository(repository, sandboxId), actions: ["pull", "push"] },
  ])}`;
}

/**
 * The replica's login: each bearer challenge is answered with a token for the scopes it names
 * (a cross-repository mount names two) that lie within `repository`, plus `repository` itself so
 * the header stays good for the next calls. Scopes outside are left out: the registry refuses.
 */
export function issuerAuth(issuer: TokenIssuer, repository: string): RegistryAuth {
  const within = (name: string) => name === repository || name.startsWith(`${repository}/`);
  return {
    async authorize(ch) {
      if (ch.scheme !== "bearer") return undefined;
      const access = new Map<string, Set<RegistryAction>>([[repository, new Set(["pull", "push", "delete"])]]);
      for (const scope of (ch.params.scope ?? "").split(" ").filter(Boolean)) {
        const first = scope.indexOf(":");
        const last = scope.lastIndexOf(":");
        if (first < 0 || last <= first || scope.slice(0, first) !== "repository") continue;
        const name = scope.slice(first + 1, last);
        if (!within(name)) continue;
        const actions = access.get(name) ?? new Set<RegistryAction>();
        for (const a of scope.slice(last + 1).split(","))
          if (a === "pull" || a === "push" || a === "delete") actions.add(a);
        access.set(name, actions);
      }
      const list = [...access].map(([name, actions]) => ({ name, actions: [...actions] }));
      return `Bearer ${issuer.mint("sbx-runtime", list)}`;
    },
  };
}

export interface TokenAuthConfig {
  keyFile: string;
  certFile: string;
  issuer: string;
  service: string;
  ttlSeconds: number;
}

/** config.snapshots.tokenAuth read from its files, each problem named by its field. */
export function loadTokenIssuer(cfg: TokenAuthConfig, clock: Clock): TokenIssuer {
  const read = (field: string, path: string) => {
    try {
      return readFileSync(path, "utf8");
    } catch (err) {
      throw new ValidationError(
        `config.snapshots.tokenAuth.${field}`,
        path,
        `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); mount the registry token key pair there (sbx registry-token-key makes one)`,
      );
    }
  };
  const keyPem = read("keyFile", cfg.keyFile);
  const certPem = read("certFile", cfg.certFile);
  let key: KeyObject;
  try {
    key = createPrivateKey(keyPem);
  } catch (err) {
    throw new ValidationError(
      "config.snapshots.tokenAuth.keyFile",
      cfg.keyFile,
      `is not a PEM private key (${(err as Error).message})`,
    );
  }
  if (key.asymmetricKeyType !== "ec" || key.asymmetricKeyDetails?.namedCurve !== "prime256v1")
    throw new ValidationError(
      "config.snapshots.tokenAuth.keyFile",
      cfg.keyFile,
      "must be an EC P-256 key (tokens are ES256)",
    );
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
  } catch (err) {
    throw new ValidationError(
      "config.snapshots.tokenAuth.certFile",
      cfg.certFile,
      `is not a PEM certificate (${(err as Error).message})`,
    );
  }
  if (!cert.checkPrivateKey(key))
    throw new ValidationError(
      "config.snapshots.tokenAuth.certFile",
      cfg.certFile,
      "is not the certificate of keyFile's key; give the pair made together",
    );
  return tokenIssuer({ ...cfg, keyPem, certPem, clock });
}

/** A new EC P-256 key and its self-signed certificate, both PEM. */
export function tokenKeyPair(o: { commonName?: string; now: Date; validDays?: number }): {
  keyPem: string;
  certPem: string;
} {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const name = seq(set(seq(oid("2.5.4.3"), tlv(0x0c, Buffer.from(o.commonName ?? "sbx registry tokens")))));
  const ecdsaSha256 = seq(oid("1.2.840.10045.4.3.2"));
  // a DER INTEGER is minimal and positive: a first byte of 0x40-0x7f is both (0x00 followed by a
  // byte below 0x80 is "illegal padding", which X509Certificate refuses: one pair in 256 did)
  const serial = randomBytes(16);
  serial[0] = (serial[0] & 0x3f) | 0x40;
  const notAfter = new Date(o.now.getTime() + (o.validDays ?? 3650) * 86_400_000);
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))), // v3
    tlv(0x02, serial),
    ecdsaSha256,
    name,
    seq(time(new Date(o.now.getTime() - 3600_000)), time(notAfter)),
    name,
    publicKey.export({ type: "spki", format: "der" }),
    tlv(
      0xa3,
      seq(
        seq(oid("2.5.29.19"), tlv(0x01, Buffer.from([0xff])), tlv(0x04, seq(tlv(0x01, Buffer.from([0xff]))))), // CA
        seq(oid("2.5.29.15"), tlv(0x01, Buffer.from([0xff])), tlv(0x04, tlv(0x03, Buffer.from([0x01, 0x86])))), // sign
      ),
    ),
  );
  const der = seq(tbs, ecdsaSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), sign("sha256", tbs, privateKey)])));
  const certPem = `-----BEGIN CERTIFICATE-----\n${der.toString("base64").replace(/.{64}/g, "$&\n").replace(/\n?$/, "\n")}-----END CERTIFICATE-----\n`;
  return { keyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(), certPem };
}

function b64url(v: string | Buffer): string {
  return Buffer.from(v).toString("base64url");
}

// DER, only what one certificate needs
function tlv(tag: number, body: Buffer): Buffer {
  const n = body.length;
  const len = n < 0x80 ? Buffer.from([n]) : n < 0x100 ? Buffer.from([0x81, n]) : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), len, body]);
}
const seq = (...parts: Buffer[]) => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]) => tlv(0x31, Buffer.concat(parts));
function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split(".").map(Number);
  const bytes = [a * 40 + b];
  for (const v of rest) {
    const groups = [v & 0x7f];
    for (let x = v >> 7; x > 0; x >>= 7) groups.unshift((x & 0x7f) | 0x80);
    bytes.push(...groups);
  }
  return tlv(0x06, Buffer.from(bytes));
}
function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, "").slice(0, 14); // YYYYMMDDHHMMSS
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}
