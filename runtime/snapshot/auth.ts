// Registry authentication seam. The client asks the provider for an Authorization header
// when the registry answers 401, passing the parsed WWW-Authenticate challenge. Static
// credentials cover docker-registry with htpasswd and ECR (basic auth with user "AWS" and a
// token from GetAuthorizationToken, refreshed by the caller's provider); bearer-token
// registries get a token from the challenge's realm.
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { UpstreamError } from "../core/errors.ts";

export interface AuthChallenge {
  scheme: string; // "basic" | "bearer" (lower-cased)
  params: Record<string, string>; // realm, service, scope, ...
}

export interface RegistryAuth {
  /** An Authorization header value for this challenge, or undefined to give up (the 401 stands). */
  authorize(challenge: AuthChallenge): Promise<string | undefined>;
}

/** Parses `Bearer realm="...",service="...",scope="..."` and `Basic realm="..."`. */
export function parseChallenge(header: string | undefined): AuthChallenge | undefined {
  if (!header) return undefined;
  const m = /^\s*(\w+)\s*(.*)$/.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /(\w+)\s*=\s*(?:"([^"]*)"|([^,\s]*))/g;
  for (let p = re.exec(m[2]); p; p = re.exec(m[2])) params[p[1].toLowerCase()] = p[2] ?? p[3] ?? "";
  return { scheme: m[1].toLowerCase(), params };
}

/** Basic credentials; for a bearer challenge they are exchanged at the realm for a token. */
export function basicAuth(username: string, password: string): RegistryAuth {
  const basic = `Basic ${Buffer.from(`${username}:${password}`).toString("base64")}`;
  return {
    async authorize(ch) {
      if (ch.scheme === "basic") return basic;
      if (ch.scheme === "bearer") return `Bearer ${await fetchToken(ch, basic)}`;
      return undefined;
    },
  };
}

/** A provider whose credentials change (e.g. ECR tokens valid for 12 h): asked on every challenge. */
export function dynamicBasicAuth(get: () => Promise<{ username: string; password: string }>): RegistryAuth {
  return {
    async authorize(ch) {
      const c = await get();
      return basicAuth(c.username, c.password).authorize(ch);
    },
  };
}

/** Anonymous: bearer realms that hand out anonymous tokens still work. */
export const anonymousAuth: RegistryAuth = {
  async authorize(ch) {
    return ch.scheme === "bearer" ? `Bearer ${await fetchToken(ch, undefined)}` : undefined;
  },
};

async function fetchToken(ch: AuthChallenge, basic: string | undefined): Promise<string> {
  const realm = ch.params.realm;
  if (!realm)
    throw new UpstreamError(
      `registry bearer challenge has no realm (${JSON.stringify(ch.params)}): configure the registry's token service`,
    );
  const url = new URL(realm);
  if (ch.params.service) url.searchParams.set("service", ch.params.service);
  if (ch.params.scope) url.searchParams.set("scope", ch.params.scope);
  const body = await new Promise<string>((resolve, reject) => {
    const req = (url.protocol === "https:" ? httpsRequest : httpRequest)(
      url,
      { headers: basic ? { authorization: basic } : {} },
      (res) => {
        let s = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (s += d));
        res.on("end", () =>
          res.statusCode === 200
            ? resolve(s)
            : reject(
                new UpstreamError(
                  `registry token service ${url.origin}${url.pathname} answered ${res.statusCode}: check the registry credentials`,
                ),
              ),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
  const parsed = JSON.parse(body) as { token?: string; access_token?: string };
  const token = parsed.token ?? parsed.access_token;
  if (!token)
    throw new UpstreamError(`registry token service ${url.origin} returned no token: check the registry credentials`);
  return token;
}
