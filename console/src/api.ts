// The console's client of the sbx API: same origin, the bearer token in the Authorization header
// (or, for the terminal's websocket, which cannot send one, in its subprotocol) and nowhere else
// (no cookie exists, so no request can be forged from another site). The token
// lives in this module's memory only: a reload asks for it again, and no other page of this
// origin (a sandbox's port seen through the path form) can read it from storage.

export interface Sandbox {
  id: string;
  owner: string;
  profile: string;
  size: string;
  phase: string;
  ready: boolean;
  reason?: string;
  message?: string;
  exitCode?: number;
  createdAt: string;
  readyAt?: string;
  expiresAt: string;
  lastActivityAt?: string;
  warm?: boolean;
  metadata: Record<string, string>;
  cpuRequestMillis?: number;
  memoryRequestBytes?: number;
}

/** An answer of the API that was not 2xx: its own code and message, shown as the API wrote them. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let token: string | undefined;

export function setToken(t: string | undefined): void {
  token = t;
}

export function hasToken(): boolean {
  return token !== undefined;
}

/**
 * The subprotocols that open a terminal websocket as this token (docs/terminals.md): a browser's
 * WebSocket cannot send Authorization, and a URL would carry the token into logs and histories.
 * The service selects sbx.terminal.v1 alone, so the token is not echoed back.
 */
export function terminalProtocols(): string[] {
  return token ? ["sbx.terminal.v1", `sbx.bearer.${base64url(token)}`] : ["sbx.terminal.v1"];
}

/** Unpadded base64url of the UTF-8 bytes (RFC 4648 §5), as the service decodes it. */
function base64url(s: string): string {
  let bin = "";
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  return token ? { ...extra, authorization: `Bearer ${token}` } : extra;
}

async function failure(res: Response): Promise<ApiError> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
    return new ApiError(res.status, body.error?.code ?? "http", body.error?.message ?? text);
  } catch {
    return new ApiError(res.status, "http", text || res.statusText);
  }
}

export async function call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    signal,
  });
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** A streamed answer, line by line (NDJSON, or text such as followed logs). */
export async function stream(
  method: string,
  path: string,
  body: unknown,
  onLine: (line: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const res = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    signal,
  });
  if (!res.ok) throw await failure(res);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl = buf.indexOf("\n");
    while (nl >= 0) {
      onLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      nl = buf.indexOf("\n");
    }
  }
  if (buf) onLine(buf);
}

/** GET a binary answer with download progress. */
export async function download(path: string, onProgress: (bytes: number) => void): Promise<Uint8Array> {
  const res = await fetch(path, { headers: headers(), credentials: "omit" });
  if (!res.ok) throw await failure(res);
  const reader = res.body!.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
    n += value.length;
    onProgress(n);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** PUT a body with upload progress (fetch reports none; XMLHttpRequest does). */
export function upload(path: string, body: Blob, type: string, onProgress: (sent: number, total: number) => void) {
  return new Promise<void>((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", path);
    if (token) xhr.setRequestHeader("authorization", `Bearer ${token}`);
    xhr.setRequestHeader("content-type", type);
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.total);
    xhr.onerror = () => reject(new ApiError(0, "network", "the upload failed: the connection broke"));
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) return resolve();
      try {
        const b = JSON.parse(xhr.responseText) as { error: { code: string; message: string } };
        reject(new ApiError(xhr.status, b.error.code, b.error.message));
      } catch {
        reject(new ApiError(xhr.status, "http", xhr.responseText));
      }
    };
    xhr.send(body);
  });
}

/** Whether a route exists: our 404 for an unknown route says "no route" (a missing sandbox does not). */
export function isMissingRoute(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404 && err.message.startsWith("no route");
}

/** base64 -> bytes (exec output frames). */
export function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
