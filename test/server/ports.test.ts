// Port traffic through the service on the REAL local backend (docs/ports.md): HTTP through the
// path and host forms, a websocket echo, an SSE stream, backpressure, access (owner only by
// default, another owner 404, public, per-port token, close), persistence across a restart, and
// refusal of ports outside the sandbox. One runtime and one sandbox serve the cases.
import { createHash } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auth } from "../support/local.ts";
import {
  api,
  type PortRuntime,
  rawGet as rawGetFrom,
  sandbox,
  sh,
  startPortRuntime,
  startServer,
  WebSocket,
} from "./ports-support.ts";

const DOMAIN = "sbx.test";
let rt: PortRuntime;
let id: string;

beforeAll(async () => {
  rt = await startPortRuntime({}, { ports: { domain: DOMAIN } });
  id = await sandbox(rt);
  await startServer(rt, id, 8000);
}, 120_000);
afterAll(async () => {
  await rt?.close();
});

const portUrl = (path = "/") => `${rt.url}/v1/sandboxes/${id}/ports/8000${path}`;

/** A raw HTTP GET over a real socket, with any Host header (fetch will not send a foreign one). */
const rawGet = (path: string, headers: Record<string, string>) => rawGetFrom(rt.port, path, headers);

describe("HTTP through the relay", () => {
  it("the path form strips its prefix, drops our token and says what it did in X-Forwarded-*", async () => {
    const res = await fetch(portUrl("/echo?a=1&b=2"), { headers: { ...auth("alice"), "x-app": "kept" } });
    expect(res.status).toBe(200);
    const seen = (await res.json()) as { path: string; headers: Record<string, string> };
    expect(seen.path).toBe("/echo?a=1&b=2");
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers["x-app"]).toBe("kept");
    expect(seen.headers.host).toBe(new URL(rt.url).host);
    expect(seen.headers["x-forwarded-prefix"]).toBe(`/v1/sandboxes/${id}/ports/8000`);
    expect(seen.headers["x-forwarded-proto"]).toBe("http");
    expect(seen.headers["x-forwarded-for"]).toBe("127.0.0.1");
  });

  it("python3 -m http.server serves a file through the path form", async () => {
    await sh(rt, id, "mkdir -p /workspace/site && echo 'hello through the relay' > /workspace/site/hello.txt");
    await sh(
      rt,
      id,
      "cd /workspace/site && (nohup python3 -m http.server 8100 --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 1",
    );
    const res = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/8100/hello.txt`, { headers: auth("alice") });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("hello through the relay\n");
  });

  it("the host form {port}-{id}.{domain} reaches the same server, with the path untouched", async () => {
    const res = await rawGet("/v1/sandboxes/anything?x=1", { host: `8000-${id}.${DOMAIN}`, ...auth("alice") });
    expect(res.status).toBe(200);
    const seen = JSON.parse(res.body) as { path: string; headers: Record<string, string> };
    expect(seen.path).toBe("/v1/sandboxes/anything?x=1");
    expect(seen.headers["x-forwarded-prefix"]).toBeUndefined();
    expect(seen.headers.host).toBe(`8000-${id}.${DOMAIN}`);
    // any other host is the API as usual
    expect((await rawGet(`/v1/sandboxes/${id}`, { host: `api.${DOMAIN}`, ...auth("alice") })).status).toBe(200);
  });

  it("a request body streams in (POST of 32 MiB, digest computed inside)", async () => {
    const body = Buffer.alloc(32 << 20, 7);
    const res = await fetch(portUrl("/sum"), { method: "POST", headers: auth("alice"), body });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(createHash("sha256").update(body).digest("hex"));
  });

  it("an SSE stream arrives event by event while it is still open", async () => {
    const res = await fetch(portUrl("/sse?n=20"), { headers: auth("alice") });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = res.body!.getReader();
    const first = await reader.read();
    // the first event came before the server finished (it sends 20, 50 ms apart)
    expect(Buffer.from(first.value!).toString()).toContain("data: event 0");
    let all = Buffer.from(first.value!).toString();
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      all += Buffer.from(r.value).toString();
    }
    expect(all.match(/data: event \d+/g)).toHaveLength(20);
  });

  it("a websocket round-trips 1,000 messages", async () => {
    const ws = new WebSocket(`${rt.url.replace("http", "ws")}/v1/sandboxes/${id}/ports/8000/ws`, {
      headers: auth("alice"),
    });
    ws.on("error", () => undefined);
    await new Promise((res, rej) => {
      ws.once("open", res);
      ws.once("close", () => rej(new Error("the upgrade was dropped")));
      ws.once("unexpected-response", (_req, r) => rej(new Error(`upgrade answered ${r.statusCode}`)));
    });
    const got: string[] = [];
    const all = new Promise<void>((res) =>
      ws.on("message", (m) => {
        got.push(m.toString());
        if (got.length === 1000) res();
      }),
    );
    for (let i = 0; i < 1000; i++) ws.send(`message ${i}`);
    await all;
    expect(got).toEqual(Array.from({ length: 1000 }, (_, i) => `message ${i}`));
    ws.close();
  });

  it("a slow reader holds the server back: a 64 MiB download does not pile up in the relay", async () => {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) =>
      http.get(portUrl("/big?mb=64"), { headers: auth("alice"), agent: false }, resolve).on("error", reject),
    );
    res.pause();
    await new Promise((r) => setTimeout(r, 1500));
    // what the server managed to send while nobody read: kernel buffers and the relays' windows, not 64 MiB
    const sentWhilePaused = Number(await sh(rt, id, "cat /tmp/sent"));
    expect(sentWhilePaused).toBeLessThan(24 << 20);
    const h = createHash("sha256");
    let n = 0;
    res.on("data", (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    res.resume();
    await new Promise((r) => res.on("end", r));
    expect(n).toBe(64 << 20);
    const block = Buffer.from(Array.from({ length: 1 << 20 }, (_, i) => i % 251));
    const want = createHash("sha256");
    for (let i = 0; i < 64; i++) want.update(block);
    expect(h.digest("hex")).toBe(want.digest("hex"));
  }, 60_000);
});

describe("access", () => {
  it("owner only by default: no token 401, another owner's 404 (as for a missing sandbox)", async () => {
    const none = await fetch(portUrl("/echo"));
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: { message: string } }).error.message).toContain(`sbx expose ${id} 8000`);
    const bob = await fetch(portUrl("/echo"), { headers: auth("bob") });
    expect(bob.status).toBe(404);
    expect(((await bob.json()) as { error: { code: string } }).error.code).toBe("not_found");
    // and bob cannot open it either
    expect((await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, { public: true }, "bob")).status).toBe(404);
  });

  it("a public port works without a token and stops when closed", async () => {
    const opened = await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, { public: true });
    expect(opened.status, opened.text).toBe(200);
    expect(opened.json()).toMatchObject({ port: 8000, public: true, url: `${rt.url}/v1/sandboxes/${id}/ports/8000/` });
    expect(opened.json().hostUrl).toBe(`http://8000-${id}.${DOMAIN}/`);
    expect(opened.json().token).toBeUndefined();
    expect((await fetch(portUrl("/echo"))).status).toBe(200);
    const closed = await api(rt, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
    expect(closed.json()).toEqual({ port: 8000, closed: true });
    expect((await fetch(portUrl("/echo"))).status).toBe(401);
  });

  it("a per-port token lets its bearer in (header or ?sbx_token=), is shown once and never reaches the server", async () => {
    const opened = await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, {});
    const token = opened.json().token as string;
    expect(token).toMatch(/^sbx_/);
    const listed = await api(rt, "GET", `/v1/sandboxes/${id}/exposed-ports`);
    expect(listed.json().ports).toEqual([expect.not.objectContaining({ token: expect.anything() })]);
    expect(listed.text).not.toContain(token);
    const viaHeader = await fetch(portUrl("/echo"), { headers: { authorization: `Bearer ${token}` } });
    expect(viaHeader.status).toBe(200);
    expect(((await viaHeader.json()) as { headers: Record<string, string> }).headers.authorization).toBeUndefined();
    const viaQuery = await fetch(portUrl(`/echo?x=1&sbx_token=${token}`));
    expect(((await viaQuery.json()) as { path: string }).path).toBe("/echo?x=1");
    expect((await fetch(portUrl("/echo"), { headers: { authorization: "Bearer sbx_wrong" } })).status).toBe(401);
    // the token opens only its own port
    expect(
      (await fetch(`${rt.url}/v1/sandboxes/${id}/ports/8100/`, { headers: { authorization: `Bearer ${token}` } }))
        .status,
    ).toBe(401);
    await api(rt, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
    expect((await fetch(portUrl("/echo"), { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
  });

  it("a websocket to a public port needs no token; to a closed one it is refused with our error body", async () => {
    const wsUrl = `${rt.url.replace("http", "ws")}/v1/sandboxes/${id}/ports/8000/ws`;
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(wsUrl);
      ws.on("error", () => undefined);
      ws.once("unexpected-response", (_req, r) => resolve(r.statusCode ?? 0));
      ws.once("open", () => resolve(101));
    });
    expect(refused).toBe(401);
  });
});

describe("refusals", () => {
  it.each([
    ["0", "0"],
    ["65536", "65536"],
    ["http", "http"],
  ])("port %s is a 400 naming the field, the value and the range", async (p, shown) => {
    const res = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/${p}/`, { headers: auth("alice") });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("validation");
    expect(body.error.message).toContain(`port: invalid value "${shown}"`);
    expect(body.error.message).toContain("1 to 65535");
  });

  it("the service's own port and a host-only port are not reachable from a sandbox id: only its own loopback", async () => {
    const hostOnly = net.createServer((s) => s.end("host secret\n"));
    await new Promise<void>((r) => hostOnly.listen(0, "127.0.0.1", () => r()));
    const hostPort = (hostOnly.address() as net.AddressInfo).port;
    try {
      for (const p of [rt.port, hostPort]) {
        const res = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/${p}/`, { headers: auth("alice") });
        expect(res.status).toBe(502);
        const text = await res.text();
        expect(text).toContain(`nothing accepted a connection on port ${p} inside the sandbox`);
        expect(text).not.toContain("host secret");
      }
    } finally {
      hostOnly.close();
    }
  });

  it("a port with nothing listening is a 502 naming the fix; a missing sandbox a 404", async () => {
    const res = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/9999/`, { headers: auth("alice") });
    expect(res.status).toBe(502);
    expect(await res.text()).toContain("start a server listening on that port");
    expect((await fetch(`${rt.url}/v1/sandboxes/sbx-nope/ports/8000/`, { headers: auth("alice") })).status).toBe(404);
  });
});

describe("persistence", () => {
  it("an exposure survives a service restart", async () => {
    const second = await startPortRuntime({}, {});
    try {
      const other = await sandbox(second);
      await api(second, "PUT", `/v1/sandboxes/${other}/exposed-ports/8000`, { public: true });
      await second.stop();
      const again = await startPortRuntime({}, { stateDir: second.stateDir });
      try {
        const listed = await api(again, "GET", `/v1/sandboxes/${other}/exposed-ports`);
        expect(listed.status, listed.text).toBe(200);
        expect(listed.json().ports).toMatchObject([{ port: 8000, public: true }]);
      } finally {
        await again.close();
      }
    } finally {
      await second.close();
    }
  }, 120_000);
});
