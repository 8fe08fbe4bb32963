// Sandbox ports on the Kubernetes backend (docs/ports.md "Kubernetes"), against the test control
// plane, over both paths: the pod's command channel (the default: the daemon connects to
// 127.0.0.1:<port> in the pod) and the API server's port-forward (channels off: sbx-kubelet
// connects there), each inside the sandbox pod's own network namespace. HTTP through the path form
// (the fixture server and python3 -m http.server), an SSE stream that ends, a websocket echo,
// backpressure, owner-only access, refused ports (502, websockets too), and the host unreachable
// from a sandbox. Wake on traffic: wake.test.ts; exposures: exposures.test.ts.
import { createHash } from "node:crypto";
import http, { type IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sh, WebSocket } from "../../server/ports-support.ts";
import { auth } from "../../support/local.ts";
import { adminClients, testKubeconfigPath } from "../runtime/support.ts";
import { type K8sPortRuntime, startK8sPortSandbox } from "./support.ts";

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

function portStats(rt: K8sPortRuntime) {
  const stats = rt.backend.portStats?.();
  if (!stats) throw new Error("the Kubernetes backend reports no port stats");
  return stats;
}

const PATHS = [
  { path: "channel", backend: {} },
  { path: "port-forward", backend: { commandChannel: { enabled: false } } },
] as const;

describe.each(PATHS)("ports on the Kubernetes backend, over $path", ({ path, backend }) => {
  let rt: K8sPortRuntime;
  let id: string;
  const portUrl = (sid: string, port: number, rest = "") => `${rt.url}/v1/sandboxes/${sid}/ports/${port}${rest}`;

  beforeAll(async () => {
    ({ rt, id } = await startK8sPortSandbox(path === "channel" ? "kports" : "kportsfw", { backend }));
  }, 300_000);

  afterAll(async () => {
    await rt?.close();
  });

  it(`carries every relayed connection over the ${path} path`, async () => {
    const before = portStats(rt);
    expect((await fetch(portUrl(id, 8000, "/echo"), { headers: auth("alice") })).status).toBe(200);
    const after = portStats(rt);
    const key = path === "channel" ? "channel" : "portForward";
    const other = path === "channel" ? "portForward" : "channel";
    expect(after[key] - before[key]).toBe(1);
    expect(after[other]).toBe(0);
    expect(await rt.manager.metrics.registry.metrics()).toContain(`sbx_port_connections_total{path="${path}"}`);
  });

  it("serves HTTP through the path form: the prefix is stripped, the body streams back", async () => {
    const res = await fetch(portUrl(id, 8000, "/echo?x=1"), { headers: auth("alice") });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { path: string; headers: Record<string, string> };
    expect(body.path).toBe("/echo?x=1");
    expect(body.headers["x-forwarded-prefix"]).toBe(`/v1/sandboxes/${id}/ports/8000`);
    expect(body.headers.authorization).toBeUndefined();
    // 8 MiB: the fixture's 1 MiB block of i % 251, eight times, byte for byte
    const block = Buffer.from(Array.from({ length: 1 << 20 }, (_, i) => i % 251));
    const big = Buffer.from(
      await (await fetch(portUrl(id, 8000, "/big?mb=8"), { headers: auth("alice") })).arrayBuffer(),
    );
    expect(big.length).toBe(8 << 20);
    expect(sha256(big)).toBe(sha256(Buffer.concat(Array(8).fill(block))));
  });

  it("python3 -m http.server serves a file through the path form", async () => {
    await sh(rt, id, "mkdir -p /workspace/site && echo 'hello through port-forward' > /workspace/site/hello.txt");
    await sh(
      rt,
      id,
      "cd /workspace/site && (nohup python3 -m http.server 8100 --bind 127.0.0.1 >/dev/null 2>&1 &); for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8100))\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1",
    );
    const res = await fetch(portUrl(id, 8100, "/hello.txt"), { headers: auth("alice") });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("hello through port-forward\n");
  });

  it("an SSE stream without a length ends when the server closes it (port-forward has no half-close)", async () => {
    // the answer has no content-length: only the server's close ends it, and that close must
    // travel back through the kubelet's forward while our side of it is still open
    const res = await fetch(portUrl(id, 8000, "/sse?n=3"), { headers: auth("alice") });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(await res.text()).toBe("data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
  }, 30_000);

  it("holds a slow reader's download back: the server inside blocks instead of the relay buffering it", async () => {
    const res = await new Promise<IncomingMessage>((resolve, reject) =>
      http.get(portUrl(id, 8000, "/big?mb=64"), { headers: auth("alice"), agent: false }, resolve).on("error", reject),
    );
    res.pause();
    await new Promise((r) => setTimeout(r, 2000));
    // what the server sent while nobody read: socket windows and stream buffers of four loopback
    // hops (server -> kubelet -> API server -> service -> client, each autotuned up to several
    // MiB), not 64 MiB; and it has stopped there, blocked, rather than being slow
    const sentWhilePaused = Number(await sh(rt, id, "cat /tmp/sent"));
    expect(sentWhilePaused).toBeLessThan(48 << 20);
    await new Promise((r) => setTimeout(r, 1500));
    expect(Number(await sh(rt, id, "cat /tmp/sent"))).toBe(sentWhilePaused);
    let got = 0;
    res.on("data", (c: Buffer) => (got += c.length));
    res.resume(); // paused explicitly above: a data listener alone does not restart it
    // a cut relay must fail here, not hang: the response closes without its end
    const how = await new Promise<string>((r) => {
      res.once("end", () => r("end"));
      res.once("close", () => r("close"));
      res.once("error", (e) => r(`error ${e.message}`));
    });
    expect({ how, got }).toEqual({ how: "end", got: 64 << 20 });
  });

  it("round-trips 1,000 websocket messages", async () => {
    const ws = new WebSocket(portUrl(id, 8000, "/ws").replace("http", "ws"), { headers: auth("alice") });
    const got: string[] = [];
    const errors: Error[] = [];
    ws.on("error", (e) => errors.push(e));
    await new Promise((r, j) => {
      ws.once("open", r);
      ws.once("unexpected-response", (_q, res) => j(new Error(`upgrade answered ${res.statusCode}`)));
    });
    const all = new Promise<void>((r) =>
      ws.on("message", (m) => {
        got.push(m.toString());
        if (got.length === 1000) r();
      }),
    );
    for (let i = 0; i < 1000; i++) ws.send(`m${i}`);
    await all;
    // the close handshake goes through and the server's close ends the relay (port-forward has
    // no half-close); a relay left open shows as the client's 30 s close timeout instead
    const t0 = performance.now();
    const closed = new Promise((r) => ws.once("close", r));
    ws.close();
    await closed;
    expect(performance.now() - t0).toBeLessThan(15_000);
    expect(got).toEqual(Array.from({ length: 1000 }, (_, i) => `m${i}`));
    expect(errors).toEqual([]);
  });

  it("answers only the owner: no token is a 401, another owner's token a 404", async () => {
    expect((await fetch(portUrl(id, 8000, "/echo"))).status).toBe(401);
    const bob = await fetch(portUrl(id, 8000, "/echo"), { headers: auth("bob") });
    expect(bob.status).toBe(404);
    expect(((await bob.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });

  it("a port nothing listens on is a 502 naming the port", async () => {
    const res = await fetch(portUrl(id, 8001, "/"), { headers: auth("alice") });
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("upstream");
    expect(body.error.message).toContain("nothing accepted a connection on port 8001 inside the sandbox");
  });

  it("a websocket upgrade to a port nothing listens on is answered 502 with our error body, not cut", async () => {
    const ws = new WebSocket(portUrl(id, 8001, "/ws").replace("http", "ws"), { headers: auth("alice") });
    ws.on("error", () => undefined);
    const got = await new Promise<{ status: number; body: string }>((resolve) => {
      ws.once("unexpected-response", (_q, res) => {
        const r = res as IncomingMessage;
        let body = "";
        r.on("data", (c: Buffer) => (body += c.toString()));
        r.on("end", () => resolve({ status: r.statusCode ?? 0, body }));
      });
      ws.once("open", () => resolve({ status: 101, body: "" }));
      ws.once("close", () => resolve({ status: -1, body: "" }));
    });
    expect(got.status).toBe(502);
    expect(JSON.parse(got.body).error).toMatchObject({ code: "upstream", details: { port: 8001, refused: true } });
    expect(got.body).toContain("nothing accepted a connection on port 8001 inside the sandbox");
  });

  it("cannot reach the host: the service's, the API server's and the node's ports from a sandbox id are refused, and the sandbox has its own network", async () => {
    const clients = adminClients(await testKubeconfigPath());
    const apiserver = Number(new URL(clients.kc.getCurrentCluster()!.server).port);
    const nodes = (await clients.core.listNode()).items;
    const kubelet = nodes.map((n) => n.status?.daemonEndpoints?.kubeletEndpoint?.Port).find((p) => p);
    expect(kubelet).toBeGreaterThan(0);
    for (const p of [rt.port, apiserver, kubelet!]) {
      const res = await fetch(portUrl(id, p, "/healthz"), { headers: auth("alice") });
      expect(res.status, `port ${p}`).toBe(502);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
        `nothing accepted a connection on port ${p} inside the sandbox`,
      );
    }
    // inside the sandbox 127.0.0.1 is its own: the service listening on the host's is not there
    const probe = await sh(
      rt,
      id,
      `python3 -c "import socket
try:
    socket.create_connection(('127.0.0.1', ${rt.port}), timeout=5); print('reached')
except OSError as e: print('refused', e.errno)"`,
    );
    expect(probe.trim()).toMatch(/^refused/);
  });
});
