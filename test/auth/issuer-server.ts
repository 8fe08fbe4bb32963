// A small OIDC issuer for the tests: a real HTTP server on loopback serving a discovery document
// and a JWKS, and signing tokens with its own RS256 and ES256 keys. Its JWKS can be made to hang,
// answer garbage or answer 10 MB, and keys can be rotated in; it counts the JWKS fetches.
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type Mode = "ok" | "hang" | "garbage" | "huge";

interface SigningKey {
  kid: string;
  alg: "RS256" | "ES256";
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function newKey(kid: string, alg: "RS256" | "ES256"): SigningKey {
  const pair =
    alg === "RS256"
      ? generateKeyPairSync("rsa", { modulusLength: 2048 })
      : generateKeyPairSync("ec", { namedCurve: "P-256" });
  return { kid, alg, ...pair };
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");

/** A compact JWS over header and payload, signed with the key (or `none`/HS256 by the caller). */
export function signJwt(header: Record<string, unknown>, payload: Record<string, unknown>, key: SigningKey): string {
  const input = `${b64(header)}.${b64(payload)}`;
  const sig =
    key.alg === "RS256"
      ? sign("sha256", Buffer.from(input), key.privateKey)
      : sign("sha256", Buffer.from(input), { key: key.privateKey, dsaEncoding: "ieee-p1363" });
  return `${input}.${sig.toString("base64url")}`;
}

export class TestIssuer {
  readonly keys: SigningKey[] = [newKey("rsa-1", "RS256"), newKey("ec-1", "ES256")];
  /** the keys the JWKS publishes (a key can sign before it is published: rotation) */
  published = new Set(["rsa-1", "ec-1"]);
  mode: Mode = "ok";
  jwksFetches = 0;
  discoveryFetches = 0;
  url = "";
  /** set: the discovery document names this jwks_uri instead of its own */
  jwksUri?: string;
  /** the Authorization header of each request, by path ("-" when none) */
  seen: { path: string; authorization: string }[] = [];
  private server = http.createServer((req, res) => this.answer(req, res));
  private sockets = new Set<Socket>();

  async start(): Promise<this> {
    this.server.on("connection", (s) => {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
      s.on("error", () => {});
    });
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  key(kid: string): SigningKey {
    const k = this.keys.find((x) => x.kid === kid);
    if (!k) throw new Error(`test issuer: no key ${kid}`);
    return k;
  }

  /** Add a key that signs at once; published says whether the JWKS shows it yet. */
  rotateIn(kid: string, alg: "RS256" | "ES256", published: boolean): SigningKey {
    const k = newKey(kid, alg);
    this.keys.push(k);
    if (published) this.published.add(kid);
    return k;
  }

  /** A token with sensible claims (aud sbx, valid for an hour from nowSeconds) and the overrides. */
  token(
    over: Record<string, unknown> = {},
    opts: { kid?: string; header?: Record<string, unknown>; nowSeconds?: number } = {},
  ): string {
    const now = opts.nowSeconds ?? Math.floor(Date.now() / 1000);
    const key = this.key(opts.kid ?? "rsa-1");
    const payload = { iss: this.url, aud: "sbx", sub: "alice", iat: now, nbf: now, exp: now + 3600, ...over };
    return signJwt({ alg: key.alg, kid: key.kid, typ: "JWT", ...opts.header }, payload, key);
  }

  private answer(req: http.IncomingMessage, res: http.ServerResponse): void {
    res.on("error", () => {});
    this.seen.push({ path: req.url ?? "", authorization: req.headers.authorization ?? "-" });
    if (req.url === "/.well-known/openid-configuration") {
      this.discoveryFetches++;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ issuer: this.url, jwks_uri: this.jwksUri ?? `${this.url}/jwks` }));
      return;
    }
    if (req.url !== "/jwks") {
      res.statusCode = 404;
      res.end("not found");
      return;
    }
    this.jwksFetches++;
    if (this.mode === "hang") return; // never answers; the socket is destroyed at close()
    if (this.mode === "garbage") {
      res.end("<html>this is not JSON");
      return;
    }
    if (this.mode === "huge") {
      // 10 MB, streamed without a content-length, so only counting the bytes catches it
      const chunk = Buffer.alloc(64 * 1024, "a");
      let sent = 0;
      const more = () => {
        while (sent < 10 * 1024 * 1024) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", more);
        }
        res.end();
      };
      more();
      return;
    }
    const keys = this.keys
      .filter((k) => this.published.has(k.kid))
      .map((k) => ({ ...k.publicKey.export({ format: "jwk" }), kid: k.kid, alg: k.alg, use: "sig" }));
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ keys }));
  }
}
