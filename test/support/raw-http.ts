// A bare HTTP client for tests that must control the connection itself: one connection per
// request (no keep-alive pool, so nothing the client holds outlives the request and the
// process's fd count means what the service holds), and a response the test can leave unread
// or cut after N bytes, as an impatient or crashed client would.
import fs from "node:fs";
import http from "node:http";

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request to completion. */
export function request(
  base: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(new URL(path, base), { method, agent: false, headers: headers(token, payload) }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
}

export interface Abandon {
  /** read this many body bytes, then disconnect */
  afterBytes?: number;
  /** or: never read the body; disconnect this long after the response headers came */
  unreadForMs?: number;
  /** or: disconnect this long after the request was sent, whether an answer came or not */
  beforeResponseMs?: number;
}

/**
 * Starts a request and disconnects as told. Resolves when the connection is gone, with the
 * status the service answered and the body bytes read.
 */
export function abandon(
  base: string,
  token: string,
  method: string,
  path: string,
  body: unknown,
  how: Abandon,
): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let bytes = 0;
    let status = 0;
    const req = http.request(new URL(path, base), { method, agent: false, headers: headers(token, payload) });
    let cutDone = false;
    const cut = () => {
      cutDone = true;
      req.destroy();
      resolve({ status, bytes });
    };
    // a destroyed request reports its own abort as an error: expected here
    req.on("error", (err) => (cutDone ? undefined : reject(err)));
    req.on("response", (res) => {
      status = res.statusCode ?? 0;
      res.on("error", () => undefined);
      if (how.unreadForMs !== undefined) {
        res.pause();
        setTimeout(cut, how.unreadForMs);
        return;
      }
      res.on("data", (c: Buffer) => {
        bytes += c.length;
        if (bytes >= (how.afterBytes ?? 0)) cut();
      });
      res.on("end", () => resolve({ status, bytes }));
    });
    req.end(payload);
    if (how.beforeResponseMs !== undefined) setTimeout(cut, how.beforeResponseMs);
  });
}

function headers(token: string, payload: string | undefined): http.OutgoingHttpHeaders {
  const h: http.OutgoingHttpHeaders = { authorization: `Bearer ${token}` };
  if (payload !== undefined) {
    h["content-type"] = "application/json";
    h["content-length"] = Buffer.byteLength(payload);
  }
  return h;
}

/** Open file descriptors of this process (the service runs in it). */
export function openFds(): number {
  return fs.readdirSync("/proc/self/fd").length;
}

/**
 * This process's TCP sockets whose peer has closed but that it still holds (CLOSE_WAIT): a
 * connection the process is done with but did not let go of, whatever its pool or watches do.
 * Sockets to `exceptPeerPort` (e.g. the test's own client connections to its service) are left out.
 */
export function closeWaitSockets(exceptPeerPort?: number): number {
  const held = new Set(
    fs.readdirSync("/proc/self/fd").flatMap((fd) => {
      try {
        return [/^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/self/fd/${fd}`))?.[1] ?? ""];
      } catch {
        return []; // closed between the listing and the read
      }
    }),
  );
  let n = 0;
  for (const table of ["/proc/self/net/tcp", "/proc/self/net/tcp6"]) {
    for (const line of fs.readFileSync(table, "utf8").split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      const peerPort = Number.parseInt(cols[2]?.split(":")[1] ?? "", 16);
      // st 08 = CLOSE_WAIT, col 9 = inode
      if (cols[3] === "08" && held.has(cols[9]) && peerPort !== exceptPeerPort) n++;
    }
  }
  return n;
}

/** Polls `probe` every 50 ms until `ok` or `ms` passed; returns the last value. */
export async function settle<T>(probe: () => T | Promise<T>, ok: (v: T) => boolean, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (ok(v) || Date.now() > until) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}
