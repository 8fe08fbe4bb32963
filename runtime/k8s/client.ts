// Kubernetes API access for the runtime: one KubeConfig, one connection pool, typed APIs,
// and the mapping from API failures to domain errors.
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
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
 * request over one shared keep-alive pool.
 */
export class PooledKubeConfig extends KubeConfig {
  private shared?: Dispatcher;
  private cached?: { headers: Record<string, string>; at: number };
  override async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    const now = Date.now();
    if (this.cached && now - this.cached.at < AUTH_REFRESH_MS && this.shared) {
      for (const [k, v] of Object.entries(this.cached.headers)) ctx.setHeaderParam(k, v);
      ctx.setDispatcher(this.shared);
      return;
    }
    const before = { ...ctx.getHeaders() };
    await super.applySecurityAuthentication(ctx);
    const added: Record<string, string> = {};
    for (const [k, v] of Object.entries(ctx.getHeaders())) if (before[k] !== v) added[k] = v;
    const built = ctx.getDispatcher();
    if (built) {
      if (!this.shared) this.shared = built;
      else if (built !== this.shared) void built.close();
      ctx.setDispatcher(this.shared);
    }
    this.cached = { headers: added, at: now };
  }
}

const AUTH_REFRESH_MS = 30_000;

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
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
  };
}

export const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

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
