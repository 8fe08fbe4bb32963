// The Manager seam over HTTP: what the CLI uses when SBX_SERVER is set. Same verbs, same
// domain errors (rebuilt from the service's {error:{code,message}} bodies), streaming exec, and
// pause/resume progress (NDJSON frames) when the caller passes onProgress.
import { createInterface } from "node:readline";
import { PassThrough, Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import type { Identity } from "../auth/claims.ts";
import { CapacityError, type ErrorCode, HTTP_STATUS, SbxError, UpstreamError } from "../core/errors.ts";
import type {
  CreateRequest,
  ExecRequest,
  ExecResult,
  ExecSession,
  ListFilter,
  LogOptions,
  Manager,
  PoolStatus,
  ResourceRange,
  Sandbox,
  SandboxResourceLine,
  SandboxResources,
  TransferOptions,
  TransferProgress,
  WaitOptions,
} from "../core/types.ts";
import type { UsageReport } from "../core/usage.ts";

export interface HttpManagerOptions {
  server: string;
  token?: string;
  /** per-request timeout for non-streaming calls */
  timeoutMs?: number;
}

/** every code the service answers with (errors.ts maps each to its status) */
const KNOWN_CODES = new Set(Object.keys(HTTP_STATUS) as ErrorCode[]);

interface ErrorBody {
  code?: string;
  message?: string;
  details?: Record<string, unknown>;
}

export async function errorFromResponse(res: Response): Promise<SbxError> {
  return errorFromText(await res.text(), res.status, Number(res.headers.get("retry-after") ?? 1));
}

/** A domain error from an error response's body text (also the terminal's refused handshake). */
function errorFromText(text: string, status: number, retryAfterSeconds: number): SbxError {
  let body: { error?: ErrorBody } = {};
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: an upstream error carrying the raw text
  }
  return errorFromBody(body.error ?? {}, `HTTP ${status}: ${text.slice(0, 200)}`, retryAfterSeconds, status);
}

/** A domain error from an {code,message,details} object (a response body or a stream's last frame). */
function errorFromBody(e: ErrorBody, fallback: string, retryAfterSeconds: number, status?: number): SbxError {
  const code = e.code as ErrorCode | undefined;
  const message = e.message ?? fallback;
  if (code === "capacity") return new CapacityError(message, retryAfterSeconds, e.details ?? {});
  if (code && KNOWN_CODES.has(code)) return new SbxError(code, message, e.details ?? {});
  return new UpstreamError(
    `server answered ${status ?? "an error"}: ${message}`,
    status === undefined ? {} : { status },
  );
}

async function drain(stdin: Uint8Array | Readable): Promise<Buffer> {
  if (stdin instanceof Uint8Array) return Buffer.from(stdin);
  const chunks: Buffer[] = [];
  for await (const c of stdin) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks);
}

/** Socket errors that mean the request reached the service and the connection then went away. */
const LOST_CONNECTION = new Set(["ECONNRESET", "EPIPE", "UND_ERR_SOCKET", "UND_ERR_CLOSED"]);

/**
 * fetch says only "fetch failed"; its cause tells a service that was never reached from one
 * that went away mid-request, which the caller must treat differently: the second may have
 * applied part of the request (an upload part of its files).
 */
function fetchFailure(err: unknown, method: string, url: string): UpstreamError {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const detail = cause?.message ?? (err as Error).message;
  if (cause?.code && LOST_CONNECTION.has(cause.code)) {
    return new UpstreamError(
      `the connection to ${url} was lost during the ${method} (${detail}): the service went away or cut the request, which may have been applied in part; check the service and retry`,
    );
  }
  return new UpstreamError(`cannot reach ${url}: ${detail}; check SBX_SERVER and that the service runs`);
}

export class HttpManager implements Manager {
  private readonly base: string;
  constructor(private readonly opts: HttpManagerOptions) {
    this.base = opts.server.replace(/\/+$/, "");
  }

  private async call(
    method: string,
    path: string,
    init: {
      body?: unknown;
      signal?: AbortSignal;
      raw?: NonNullable<RequestInit["body"]>;
      contentType?: string;
      timeout?: boolean;
      accept?: string;
    } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.opts.token) headers.authorization = `Bearer ${this.opts.token}`;
    if (init.accept) headers.accept = init.accept;
    let body: NonNullable<RequestInit["body"]> | undefined;
    if (init.raw !== undefined) {
      body = init.raw;
      headers["content-type"] = init.contentType ?? "application/octet-stream";
    } else if (init.body !== undefined) {
      body = JSON.stringify(init.body);
      headers["content-type"] = "application/json";
    }
    const signals = [
      init.signal,
      init.timeout === false ? undefined : AbortSignal.timeout(this.opts.timeoutMs ?? 120_000),
    ].filter((s): s is AbortSignal => !!s);
    let res: Response;
    try {
      res = await fetch(`${this.base}${path}`, {
        method,
        headers,
        body,
        signal: signals.length ? AbortSignal.any(signals) : undefined,
        ...(init.raw !== undefined ? { duplex: "half" } : {}),
      } as RequestInit);
    } catch (err) {
      throw fetchFailure(err, method, `${this.base}${path}`);
    }
    if (!res.ok) throw await errorFromResponse(res);
    return res;
  }

  private async json<T>(method: string, path: string, init?: Parameters<HttpManager["call"]>[2]): Promise<T> {
    const res = await this.call(method, path, init);
    return (await res.json()) as T;
  }

  private static sb(id: string): string {
    return `/v1/sandboxes/${encodeURIComponent(id)}`;
  }

  async create(req: CreateRequest): Promise<Sandbox> {
    const { owner: _owner, ...body } = req; // the token decides the owner
    return this.json("POST", "/v1/sandboxes", { body });
  }

  async wait(_owner: string, id: string, opts: WaitOptions): Promise<Sandbox> {
    return this.json("POST", `${HttpManager.sb(id)}/wait`, {
      body: { timeoutSeconds: opts.timeoutMs / 1000 },
      signal: opts.signal,
      timeout: false,
    });
  }

  async exec(_owner: string, id: string, req: ExecRequest): Promise<ExecSession> {
    // a command on a pty is a terminal: the websocket route, loaded only when one is opened
    if (req.pty) {
      const { terminalExec } = await import("./terminal.ts");
      return terminalExec({ server: this.base, token: this.opts.token, errorFrom: errorFromText }, id, {
        ...req,
        pty: req.pty,
      });
    }
    const ac = new AbortController();
    const stdin = req.stdin === undefined ? undefined : (await drain(req.stdin)).toString("base64");
    const res = await this.call("POST", `${HttpManager.sb(id)}/exec`, {
      body: { command: req.command, env: req.env, cwd: req.cwd, timeoutMs: req.timeoutMs, stdin },
      signal: ac.signal,
      timeout: false,
    });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const t0 = Date.now();
    const result = (async (): Promise<ExecResult> => {
      const lines = createInterface({ input: Readable.fromWeb(res.body as WebReadableStream), crlfDelay: Infinity });
      try {
        for await (const line of lines) {
          if (!line) continue;
          const f = JSON.parse(line) as {
            stream?: "stdout" | "stderr";
            data?: string;
            exit?: ExecResult;
            error?: { code: ErrorCode; message: string };
          };
          if (f.stream) (f.stream === "stdout" ? stdout : stderr).write(Buffer.from(f.data ?? "", "base64"));
          else if (f.exit) return f.exit;
          else if (f.error) throw new SbxError(f.error.code, f.error.message);
        }
        throw new UpstreamError(`exec stream for ${id} ended without an exit frame after ${Date.now() - t0} ms`);
      } finally {
        stdout.end();
        stderr.end();
      }
    })();
    return { stdout, stderr, result, kill: () => ac.abort(new Error("killed by the client")) };
  }

  async putArchive(_owner: string, id: string, dir: string, tar: Readable): Promise<void> {
    const res = await this.call("PUT", `${HttpManager.sb(id)}/files?path=${encodeURIComponent(dir)}`, {
      raw: Readable.toWeb(tar) as unknown as NonNullable<RequestInit["body"]>,
      contentType: "application/x-tar",
      timeout: false,
    });
    await res.arrayBuffer();
  }

  /**
   * The archive as it arrives. The service cuts the response when the transfer fails after
   * its first byte (runtime/server/files.ts); that surfaces here as an error of the stream
   * naming the download and how far it got, never as a short archive that ends cleanly.
   */
  async getArchive(_owner: string, id: string, path: string): Promise<Readable> {
    const ac = new AbortController();
    const res = await this.call("GET", `${HttpManager.sb(id)}/files?path=${encodeURIComponent(path)}`, {
      timeout: false,
      signal: ac.signal,
    });
    const body = Readable.fromWeb(res.body as WebReadableStream);
    const out = new PassThrough();
    let bytes = 0;
    body.on("data", (c: Buffer) => (bytes += c.length));
    body.on("error", (err) => {
      out.destroy(
        new UpstreamError(
          `download of ${id}:${path} broke off after ${bytes} bytes (${err.message}${err.cause ? `: ${(err.cause as Error).message}` : ""}): the service reported a failure or the connection was lost; the archive is incomplete, retry the copy`,
          { id, path, bytes },
        ),
      );
    });
    // a reader that stops early cancels the request, which stops tar in the sandbox
    out.once("close", () => {
      if (!out.writableFinished) ac.abort(new Error("download abandoned by the reader"));
    });
    body.pipe(out);
    return out;
  }

  async logs(_owner: string, id: string, opts: LogOptions): Promise<Readable> {
    const q = new URLSearchParams();
    if (opts.follow) q.set("follow", "true");
    if (opts.tailLines !== undefined) q.set("tailLines", String(opts.tailLines));
    const res = await this.call("GET", `${HttpManager.sb(id)}/logs${q.size ? `?${q}` : ""}`, { timeout: false });
    return Readable.fromWeb(res.body as WebReadableStream);
  }

  async get(_owner: string, id: string): Promise<Sandbox> {
    return this.json("GET", HttpManager.sb(id));
  }

  async list(_filter: ListFilter): Promise<Sandbox[]> {
    return (await this.json<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes")).sandboxes;
  }

  async kill(_owner: string, id: string): Promise<void> {
    await this.call("DELETE", HttpManager.sb(id));
  }

  // Always the NDJSON variant, progress wanted or not: a plain JSON answer sends nothing until
  // the end, and fetch gives up on a response whose headers or body stay silent for 300 s (a
  // large workspace takes longer); progress frames keep the response moving. No client timeout
  // of our own either: the service bounds each step (registry requests, ready wait, hooks).
  async pause(_owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    return this.transfer("pause", id, opts);
  }

  async resume(_owner: string, id: string, opts: TransferOptions = {}): Promise<Sandbox> {
    return this.transfer("resume", id, opts);
  }

  private async transfer(op: "pause" | "resume", id: string, opts: TransferOptions): Promise<Sandbox> {
    const res = await this.call("POST", `${HttpManager.sb(id)}/${op}`, {
      accept: "application/x-ndjson",
      timeout: false,
    });
    // a service that does not stream answers plain JSON: the same result, without progress
    if (!(res.headers.get("content-type") ?? "").startsWith("application/x-ndjson"))
      return (await res.json()) as Sandbox;
    const lines = createInterface({ input: Readable.fromWeb(res.body as WebReadableStream), crlfDelay: Infinity });
    for await (const line of lines) {
      if (!line) continue;
      const f = JSON.parse(line) as { progress?: TransferProgress; sandbox?: Sandbox; error?: ErrorBody };
      if (f.progress) opts.onProgress?.(f.progress);
      else if (f.sandbox) return f.sandbox;
      else if (f.error)
        throw errorFromBody(f.error, `${op} ${id} failed`, Number(f.error.details?.retryAfterSeconds ?? 1));
    }
    throw new UpstreamError(
      `${op} of ${id}: the progress stream ended without a result (connection lost?); the ${op} may still finish: check with sbx get ${id}`,
    );
  }

  /** Who the token makes the caller: owner, team, and the tokens file or issuer that said so. */
  async whoami(): Promise<Identity> {
    return this.json<Identity>("GET", "/v1/whoami");
  }

  async poolStatus(): Promise<PoolStatus[]> {
    return (await this.json<{ pools: PoolStatus[] }>("GET", "/v1/pool")).pools;
  }

  /** GET /v1/sandboxes/:id/metrics, cut to the range when given (Unix seconds on the wire). */
  resources(_owner: string, id: string, range: ResourceRange = {}): Promise<SandboxResources> {
    const q = new URLSearchParams();
    if (range.startMs !== undefined) q.set("start", String(Math.floor(range.startMs / 1000)));
    if (range.endMs !== undefined) q.set("end", String(Math.ceil(range.endMs / 1000)));
    return this.json<SandboxResources>("GET", `${HttpManager.sb(id)}/metrics${q.size ? `?${q}` : ""}`);
  }

  /** GET /v1/resources: each of the token owner's sandboxes with its newest sample. */
  async resourceLines(_owner?: string): Promise<SandboxResourceLine[]> {
    return (await this.json<{ sandboxes: SandboxResourceLine[] }>("GET", "/v1/resources")).sandboxes;
  }

  /** GET /v1/usage: the token's team (every team for an admin); the owner is the token's. */
  usage(_owner?: string): Promise<UsageReport> {
    return this.json<UsageReport>("GET", "/v1/usage");
  }
}
