// Kubernetes API access for the runtime: one KubeConfig, one connection pool, typed APIs (the
// budget-share ledger's on a pool of its own), one TLS context for the exec websockets, and the
// mapping from API failures to domain errors.
import type { RequestOptions as HttpsRequestOptions } from "node:https";
import tls, { type SecureContext, type SecureContextOptions } from "node:tls";
import {
  ApiException,
  type ConfigurationOptions,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  Observable,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { ConflictError, NotFoundError, SbxError, UpstreamError, ValidationError } from "../core/errors.ts";

type RequestContext = Parameters<KubeConfig["applySecurityAuthentication"]>[0];
type Dispatcher = NonNullable<ReturnType<RequestContext["getDispatcher"]>>;

/**
 * client-node builds a fresh connection pool (a new TLS context, and so a fresh handshake)
 * and re-reads the credential files for every API call. On the create path that is most of
 * the cost, so this config authenticates once, keeps the headers it produced for a short
 * while (token files still rotate: they are re-read every AUTH_REFRESH_MS), and sends every
 * request over shared keep-alive pools built on one TLS context:
 * - ordinary requests share at most MAX_CONNECTIONS connections. Without a bound, a burst (an
 *   activity flush patching 1,000 records at once, the records of a create burst) opened a TLS
 *   connection per request in flight, each a handshake and ~100 KiB of native memory, and
 *   client-node's pool let them go after 4 s idle, so the next burst paid again;
 * - watches and followed logs, which hold their connection for as long as they run, have an
 *   unbounded pool of their own, so no number of them can starve the requests.
 */
export class PooledKubeConfig extends KubeConfig {
  private pools?: { requests: Dispatcher; streams: Dispatcher };
  private cached?: { headers: Record<string, string>; at: number };
  override async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    const now = Date.now();
    if (this.cached && now - this.cached.at < AUTH_REFRESH_MS) {
      for (const [k, v] of Object.entries(this.cached.headers)) ctx.setHeaderParam(k, v);
    } else {
      const before = { ...ctx.getHeaders() };
      await super.applySecurityAuthentication(ctx);
      const added: Record<string, string> = {};
      for (const [k, v] of Object.entries(ctx.getHeaders())) if (before[k] !== v) added[k] = v;
      const built = ctx.getDispatcher();
      if (built && !this.pools) this.pools = await this.poolsLike(built);
      if (built && built !== this.pools?.requests && built !== this.pools?.streams) void built.close();
      this.cached = { headers: added, at: now };
    }
    if (this.pools) ctx.setDispatcher(holdsConnection(ctx.getUrl()) ? this.pools.streams : this.pools.requests);
  }

  /** What the pools hold now: connections by pool (undici's counts), for tests and metrics. */
  poolStats(): { requests: number; streams: number } | undefined {
    if (!this.pools) return undefined;
    return { requests: connectedOf(this.pools.requests), streams: connectedOf(this.pools.streams) };
  }

  /**
   * The two pools, built with the class of the dispatcher client-node built (its own undici's
   * Agent: a dispatcher of another undici version does not fit its fetch) from the options it
   * derives from this kubeconfig. A proxy or SOCKS dispatcher is used as built, for both.
   */
  private async poolsLike(built: Dispatcher): Promise<{ requests: Dispatcher; streams: Dispatcher }> {
    const https: HttpsRequestOptions = {};
    await this.applyToHTTPSOptions(https);
    const o = this.createDispatcherOptions(this.getCurrentCluster(), {
      ca: https.ca,
      cert: https.cert,
      key: https.key,
      pfx: https.pfx,
      passphrase: https.passphrase,
      ...(https.rejectUnauthorized !== undefined ? { rejectUnauthorized: https.rejectUnauthorized } : {}),
      ...(https.servername !== undefined ? { servername: https.servername } : {}),
    });
    if (o.type !== "agent") return { requests: built, streams: built };
    const connect = { ...o.connect, secureContext: tlsContextsOf(this).contextFor(o.connect as SecureContextOptions) };
    const Agent = built.constructor as new (options: object) => Dispatcher;
    return {
      requests: new Agent({ connections: MAX_CONNECTIONS, keepAliveTimeout: KEEP_ALIVE_MS, connect }),
      streams: new Agent({ keepAliveTimeout: KEEP_ALIVE_MS, connect }),
    };
  }
}

/** ordinary API requests in flight at once per replica; more wait in the pool's queue */
export const MAX_CONNECTIONS = 32;
/** an idle connection is kept this long (client-node's default pool: 4 s; client-go: 90 s) */
const KEEP_ALIVE_MS = 30_000;

/** requests that keep their connection open for as long as they run: watches and followed logs */
export function holdsConnection(url: string): boolean {
  const q = url.indexOf("?");
  if (q < 0) return false;
  const params = new URLSearchParams(url.slice(q + 1));
  return ["watch", "follow"].some((k) => params.get(k) === "true" || params.get(k) === "1");
}

function connectedOf(d: Dispatcher): number {
  const stats = (d as unknown as { stats?: Record<string, { connected?: number }> }).stats ?? {};
  return Object.values(stats).reduce((n, s) => n + (s.connected ?? 0), 0);
}

const AUTH_REFRESH_MS = 30_000;

/** the TLS options that shape a context (the rest, like servername, belong to the connection) */
const CONTEXT_FIELDS = [
  "ca",
  "cert",
  "key",
  "pfx",
  "passphrase",
  "ciphers",
  "crl",
  "ecdhCurve",
  "minVersion",
  "maxVersion",
  "secureOptions",
  "secureProtocol",
] as const satisfies readonly (keyof SecureContextOptions)[];

/**
 * One TLS context for every exec websocket while the kubeconfig's credentials stay the same.
 * Given the CA, certificate and key, tls.connect builds a context per connection: it parses
 * the CA and the private key each time, which measured half of a handshake's CPU (RSA 2048).
 * client-node re-reads the credential files on every connect, so a rotated certificate shows
 * up here as different material and gets a new context; unchanged material costs a byte
 * compare. `create` is injectable so tests can count the contexts built.
 */
export class TlsContextCache {
  private current?: { material: SecureContextOptions; context: SecureContext };

  constructor(
    private readonly create: (o: SecureContextOptions) => SecureContext = (o) => tls.createSecureContext(o),
  ) {}

  /** the shared context for these connection options (the context-shaping fields of them) */
  contextFor(options: SecureContextOptions): SecureContext {
    const material: SecureContextOptions = {};
    for (const f of CONTEXT_FIELDS) if (options[f] !== undefined) Object.assign(material, { [f]: options[f] });
    if (this.current && sameMaterial(this.current.material, material)) return this.current.context;
    const context = this.create(material);
    this.current = { material, context };
    return context;
  }
}

/**
 * The shared context cache of a kubeconfig: every exec and port-forward websocket built on one
 * (each backend replica builds its own) shares its TLS context.
 */
const tlsContexts = new WeakMap<KubeConfig, TlsContextCache>();
export function tlsContextsOf(kc: KubeConfig): TlsContextCache {
  const known = tlsContexts.get(kc);
  if (known) return known;
  const fresh = new TlsContextCache();
  tlsContexts.set(kc, fresh);
  return fresh;
}

function sameMaterial(a: SecureContextOptions, b: SecureContextOptions): boolean {
  return CONTEXT_FIELDS.every((f) => sameValue(a[f], b[f]));
}

function sameValue(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameValue(x, b[i]));
  }
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b);
  // strings, numbers; a key object ({pem, passphrase}) compares by content
  if (a && b && typeof a === "object" && typeof b === "object") return JSON.stringify(a) === JSON.stringify(b);
  return a === b;
}

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
  /**
   * The budget-share ledger's Lease API, on a connection pool of its own: its renewals decide
   * whether the replica may admit at all, so they must not wait behind the shared pool's record
   * writes, pod patches and watches (a burst there queued a renewal for up to 3.9 s while new
   * connections were being opened). Costs one more keep-alive connection per replica.
   */
  shares: CoordinationV1Api;
}

/** From an explicit kubeconfig path, else the usual discovery (KUBECONFIG, in-cluster). */
export function loadKubeClients(kubeconfigPath?: string): KubeClients {
  const kc = new PooledKubeConfig();
  try {
    if (kubeconfigPath) kc.loadFromFile(kubeconfigPath);
    else kc.loadFromDefault();
  } catch (err) {
    throw new ValidationError(
      "config.kubernetes.kubeconfigPath",
      kubeconfigPath ?? "(default discovery)",
      `cannot load a kubeconfig: ${(err as Error).message}; point it at a readable kubeconfig file`,
    );
  }
  if (!kc.getCurrentCluster()) {
    throw new ValidationError(
      "config.kubernetes.kubeconfigPath",
      kubeconfigPath ?? "(default discovery)",
      "the kubeconfig has no current cluster; set current-context",
    );
  }
  return clientsFor(kc);
}

export function clientsFor(kc: KubeConfig): KubeClients {
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    coordination: kc.makeApiClient(CoordinationV1Api),
    shares: ownPool(kc).makeApiClient(CoordinationV1Api),
  };
}

/** The same cluster and credentials as kc, with a connection pool of its own. */
export function ownPool(kc: KubeConfig): KubeConfig {
  const own = new PooledKubeConfig();
  own.loadFromOptions({
    clusters: kc.getClusters(),
    users: kc.getUsers(),
    contexts: kc.getContexts(),
    currentContext: kc.getCurrentContext(),
  });
  return own;
}

/** Request options that abort the request when `signal` does (client-node takes no signal of its own). */
export function abortOn(signal: AbortSignal): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (ctx) => {
          ctx.setSignal(signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: (res) => new Observable(Promise.resolve(res)),
      },
    ],
    middlewareMergeStrategy: "append",
  };
}

export const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
/** Options for an RFC 6902 JSON patch, on top of opt (e.g. abortOn(signal)). */
export const jsonPatch = (opt?: ConfigurationOptions) => setHeaderOptions("Content-Type", PatchStrategy.JsonPatch, opt);

export function statusCode(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  const e = err as { code?: unknown; statusCode?: unknown };
  if (typeof e?.statusCode === "number") return e.statusCode;
  return undefined;
}

export const isNotFound = (err: unknown) => statusCode(err) === 404;
export const isConflict = (err: unknown) => statusCode(err) === 409;

/** The API server's own message (the Status object's message), for error text. */
export function apiMessage(err: unknown): string {
  if (err instanceof ApiException) {
    const body = err.body as unknown;
    if (typeof body === "string") {
      try {
        const parsed = JSON.parse(body) as { message?: string };
        if (parsed.message) return parsed.message;
      } catch {
        return body.slice(0, 500);
      }
      return body.slice(0, 500);
    }
    const msg = (body as { message?: string } | undefined)?.message;
    if (msg) return msg;
  }
  return (err as Error)?.message ?? String(err);
}

/** Turns an API failure during `what` into the domain error callers map to statuses. */
export function toDomainError(err: unknown, what: string, object: { kind: string; name: string }): SbxError {
  if (err instanceof SbxError) return err;
  const code = statusCode(err);
  const msg = apiMessage(err);
  if (code === 404) return new NotFoundError(object.kind, object.name);
  if (code === 409) return new ConflictError(`${what}: ${object.kind} ${object.name}: ${msg}`, { name: object.name });
  if (code === 403) {
    return new UpstreamError(
      `${what}: the API server forbade it (${msg}); grant the manager the RBAC rules in runtime/k8s/contract.ts`,
      { status: 403 },
    );
  }
  return new UpstreamError(`${what}: ${object.kind} ${object.name}: ${code ? `HTTP ${code}: ` : ""}${msg}`, {
    status: code,
  });
}
