// One HTTP exchange with an OCI distribution registry: the bearer/basic challenge answered
// through RegistryAuth (and the header kept for the next calls), redirects followed without
// credentials off-origin (blob stores hand out signed URLs), and every unexpected status mapped
// to our errors with the registry's own text and a hint. The OCI verbs are oci.ts.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { NotFoundError, UpstreamError } from "../core/errors.ts";
import { parseChallenge, type RegistryAuth } from "./auth.ts";

export interface RegistryResponse {
  status: number;
  headers: IncomingMessage["headers"];
  res: IncomingMessage;
}

export interface CallOptions {
  followRedirects?: boolean;
  /** a 404 becomes NotFoundError(kind, name) */
  notFound?: [string, string];
}

export class RegistryHttp {
  private readonly agent: HttpAgent;
  private authHeader?: string;

  /**
   * @param base the registry's name (snapshot references and messages carry its host)
   * @param address where requests go, asked at each call, when that is not `base` itself: an
   *   in-cluster Service reached at one of its ready pods (runtime/k8s/registryEndpoint.ts)
   */
  constructor(
    readonly base: URL,
    private readonly auth?: RegistryAuth,
    private readonly address?: () => URL,
  ) {
    this.agent = base.protocol === "https:" ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  }

  /** The origin requests go to now: `base`, or the address it currently resolves to. */
  origin(): URL {
    return this.address?.() ?? this.base;
  }

  close(): void {
    this.agent.destroy();
  }

  /** The upload URL the registry answered with; its absence means this is not an OCI registry. */
  location(r: RegistryResponse, what: string): string {
    const loc = r.headers.location;
    if (!loc)
      throw new UpstreamError(
        `registry ${this.base.host}: ${what}: response ${r.status} has no Location header; is this an OCI distribution registry?`,
      );
    return String(loc);
  }

  /**
   * One request, answering a 401 challenge once with `auth` (the header is then reused) and, when
   * asked, following redirects (a blob store's signed URL gets no credentials). A status outside
   * `expect` is an UpstreamError with the registry's text, or a NotFoundError for `notFound`.
   */
  async call(
    method: string,
    path: string,
    headers: Record<string, string>,
    body: Buffer | undefined,
    expect: number[],
    opts: CallOptions = {},
  ): Promise<RegistryResponse> {
    const origin = this.origin();
    let url = new URL(path, origin);
    let sameOrigin = true;
    for (let hop = 0; hop < 6; hop++) {
      const h: Record<string, string> = { ...headers };
      if (this.authHeader && sameOrigin) h.authorization = this.authHeader;
      let r = await send(method, url, h, body, sameOrigin ? this.agent : undefined);
      if (r.status === 401 && sameOrigin && this.auth) {
        r.res.resume();
        const challenge = parseChallenge(String(r.headers["www-authenticate"] ?? ""));
        const header = challenge && (await this.auth.authorize(challenge));
        if (header) {
          this.authHeader = header;
          r = await send(method, url, { ...h, authorization: header }, body, this.agent);
        }
      }
      if (opts.followRedirects && [301, 302, 303, 307, 308].includes(r.status) && r.headers.location) {
        r.res.resume();
        const next = new URL(String(r.headers.location), url);
        sameOrigin = next.origin === origin.origin;
        url = next;
        continue;
      }
      if (expect.includes(r.status)) return r;
      const text = await readText(r.res, 2000);
      if (r.status === 404 && opts.notFound) throw new NotFoundError(opts.notFound[0], opts.notFound[1]);
      const hint =
        r.status === 401 || r.status === 403
          ? "check the snapshot registry credentials and that they may push and pull this repository"
          : "check the registry's health and logs";
      throw new UpstreamError(
        `registry ${this.base.host}: ${method} ${url.pathname} answered ${r.status} (expected ${expect.join("/")}): ${text.trim()}: ${hint}`,
        {
          status: r.status,
        },
      );
    }
    throw new UpstreamError(
      `registry ${this.base.host}: ${method} ${path}: too many redirects; check the registry's storage redirect settings`,
    );
  }
}

function send(
  method: string,
  url: URL,
  headers: Record<string, string>,
  body: Buffer | undefined,
  agent: HttpAgent | undefined,
): Promise<RegistryResponse> {
  return new Promise((resolve, reject) => {
    const fn = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = fn(url, { method, headers, agent }, (res) =>
      resolve({ status: res.statusCode ?? 0, headers: res.headers, res }),
    );
    req.on("error", (e) =>
      reject(
        new UpstreamError(
          `registry ${url.host}: ${method} ${url.pathname}: ${e.message}: check that the registry is reachable`,
        ),
      ),
    );
    req.end(body);
  });
}

async function readText(res: IncomingMessage, max: number): Promise<string> {
  let s = "";
  for await (const p of res as AsyncIterable<Buffer>) if (s.length < max) s += p.toString("utf8");
  return s.slice(0, max);
}
