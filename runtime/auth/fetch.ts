// One bounded GET of an issuer's JSON (discovery document, JWKS): a deadline for the whole
// exchange (connect, headers and body), a cap on the bytes read (a 10 MB answer is cut at the cap,
// not buffered), the issuer's own CA and, for a Kubernetes API server, a bearer token read from a
// file at each fetch (projected tokens rotate). A failure is an Error whose message says what went
// wrong in terms of the URL, never the bearer token.
import http from "node:http";
import https from "node:https";

export interface FetchLimits {
  timeoutMs: number;
  maxBytes: number;
}

export interface FetchOptions extends FetchLimits {
  /** PEM bundle of CAs to trust instead of the system's (the test API server's own CA) */
  ca?: string;
  /** Authorization: Bearer for the request (the runtime's service-account token) */
  bearer?: string;
}

/** GET url and parse JSON, within the limits. */
export type JsonFetcher = (url: string, opts: FetchOptions) => Promise<unknown>;

export const fetchJson: JsonFetcher = (url, opts) =>
  new Promise((resolve, reject) => {
    const u = new URL(url);
    const client = u.protocol === "https:" ? https : http;
    // the Kubernetes API server answers its JWKS only as application/jwk-set+json (406 otherwise)
    const headers: Record<string, string> = { accept: "application/json, application/jwk-set+json" };
    if (opts.bearer) headers.authorization = `Bearer ${opts.bearer}`;
    let settled = false;
    const fail = (message: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      req.destroy();
      reject(new Error(`GET ${url}: ${message}`));
    };
    const req = client.request(u, { method: "GET", headers, ca: opts.ca, agent: false }, (res) => {
      res.on("error", (err) => fail(err.message));
      const status = res.statusCode ?? 0;
      const declared = Number(res.headers["content-length"] ?? 0);
      if (declared > opts.maxBytes) return fail(`answer of ${declared} bytes is over the limit of ${opts.maxBytes}`);
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > opts.maxBytes) return fail(`answer is over the limit of ${opts.maxBytes} bytes`);
        chunks.push(c);
      });
      res.on("end", () => {
        if (settled) return;
        const text = Buffer.concat(chunks).toString("utf8");
        if (status !== 200) return fail(`HTTP ${status}: ${text.slice(0, 200).replace(/\s+/g, " ")}`);
        try {
          const doc = JSON.parse(text);
          settled = true;
          clearTimeout(deadline);
          resolve(doc);
        } catch {
          fail(`the answer is not JSON (${size} bytes starting ${JSON.stringify(text.slice(0, 40))})`);
        }
      });
    });
    req.on("error", (err) => fail(err.message));
    const deadline = setTimeout(() => fail(`no complete answer within ${opts.timeoutMs} ms`), opts.timeoutMs);
    req.end();
  });
