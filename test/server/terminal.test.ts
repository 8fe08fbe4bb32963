// The terminal websocket (GET /v1/sandboxes/{id}/terminal) over a real socket to the real service
// on the local platform: a shell on a pty echoes input, `tty` names /dev/pts/N, a resize reaches
// `stty size`, the exit code arrives in the exit frame; refusals are plain HTTP answers before the
// upgrade (bad sizes 400 naming cols, another owner 404, no token 401); a malformed control frame
// closes with 1008 and the service goes on; a client that never reads stalls the command instead
// of growing the service's buffers, and closing it leaves nothing running in the sandbox.
import http from "node:http";
import { createRequire } from "node:module";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { terminalQuery } from "../../runtime/core/terminal.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime, type TOKENS } from "../support/local.ts";

interface WsClient {
  send(data: string | Buffer): void;
  close(): void;
  on(event: "message", fn: (data: Buffer, isBinary: boolean) => void): WsClient;
  on(event: "error", fn: (err: Error) => void): WsClient;
  once(event: "open", fn: () => void): WsClient;
  once(event: "close", fn: (code: number, reason: Buffer) => void): WsClient;
  once(event: "unexpected-response", fn: (req: unknown, res: http.IncomingMessage) => void): WsClient;
}
const WebSocket = createRequire(import.meta.url)("ws") as new (
  url: string,
  opts?: { headers?: Record<string, string> },
) => WsClient;

let rt: LocalRuntime;
let base = "";
let id: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "400m", memory: "4Gi" } }, { terminals: { maxPerOwner: 3 } });
  base = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

/** Polls until `ok()` returns a value; the bound is a safety net far above a normal wait, never the assertion. */
async function until<T>(what: string, ok: () => T | undefined | Promise<T | undefined>, ms = 30_000): Promise<T> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    const v = await ok();
    if (v !== undefined && v !== false) return v;
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

/** A terminal client: what it shows so far, the control frames, and how it closed. */
function openTerminal(query: string, owner: keyof typeof TOKENS = "alice") {
  const ws = new WebSocket(`${base.replace("http", "ws")}/v1/sandboxes/${id}/terminal?${query}`, {
    headers: auth(owner),
  });
  const t = {
    ws,
    text: "",
    controls: [] as Record<string, unknown>[],
    closed: undefined as { code: number; reason: string } | undefined,
    errors: [] as Error[],
    opened: new Promise<void>((resolve, reject) => {
      ws.once("open", resolve);
      ws.once("unexpected-response", (_req, res) => reject(new Error(`refused: ${res.statusCode}`)));
      ws.on("error", reject);
    }),
    async waitFor(re: RegExp): Promise<RegExpMatchArray> {
      return until(
        `${re} on the terminal (it shows ${JSON.stringify(t.text.slice(-300))})`,
        () => t.text.match(re) ?? undefined,
      );
    },
    async waitClosed() {
      return until("the terminal's close", () => t.closed);
    },
  };
  ws.on("error", (e) => t.errors.push(e));
  ws.on("message", (data, isBinary) => {
    if (isBinary) t.text += data.toString();
    else t.controls.push(JSON.parse(data.toString()));
  });
  ws.once("close", (code, reason) => (t.closed = { code, reason: reason.toString() }));
  return t;
}

/** The raw HTTP answer to a websocket handshake (a refusal is a plain response). */
function handshake(path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, {
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        ...headers,
      },
      agent: false,
    });
    req.on("response", (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      res.on("error", reject);
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, body: "" });
    });
    req.on("error", reject);
    req.end();
  });
}

/** How many processes the sandbox holds, seen by one exec (which counts itself the same way each time). */
async function processCount(): Promise<number> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", "ls -d /proc/[0-9]* | wc -l"] },
  });
  return Number(parseExecFrames(res.body).stdout.trim());
}

describe("the terminal websocket", () => {
  it("runs the login shell on a pty: input echoes, tty is /dev/pts/N, resize reaches stty, exit code in the exit frame", async () => {
    const t = openTerminal(terminalQuery({ size: { cols: 100, rows: 30 } }));
    await t.opened;
    t.ws.send(Buffer.from("echo hi-$((6*7)); tty; stty size\r"));
    await t.waitFor(/hi-42/);
    expect(t.text).toContain("echo hi-$((6*7))"); // the terminal echoed what was typed
    await t.waitFor(/\/dev\/pts\/\d+/);
    await t.waitFor(/30 100/);
    t.ws.send(JSON.stringify({ type: "resize", cols: 77, rows: 22 }));
    t.ws.send(Buffer.from("stty size\r"));
    await t.waitFor(/22 77/);
    t.ws.send(Buffer.from("exit 3\r"));
    const closed = await t.waitClosed();
    expect(closed.code).toBe(1000);
    expect(t.controls).toEqual([expect.objectContaining({ type: "exit", exitCode: 3, timedOut: false })]);
  });

  it("runs the command the query names, with its env and cwd; a signal reaches the foreground job", async () => {
    const t = openTerminal(
      terminalQuery({ command: ["bash", "--norc", "-i"], env: { GREETING: "hello-term" }, cwd: "/tmp" }),
    );
    await t.opened;
    t.ws.send(Buffer.from('echo "$GREETING in $PWD"\r'));
    await t.waitFor(/hello-term in \/tmp/);
    t.ws.send(Buffer.from("sleep 300\r"));
    await t.waitFor(/sleep 300\r\n/);
    // a moment for the job to become the foreground one; the test then waits for its end
    await new Promise((r) => setTimeout(r, 300));
    t.ws.send(JSON.stringify({ type: "signal", signal: 2 }));
    t.ws.send(Buffer.from("echo after-$?\r"));
    await t.waitFor(/after-130/);
    t.ws.send(Buffer.from("exit\r"));
    await t.waitClosed();
    expect(t.controls.at(-1)).toMatchObject({ type: "exit", exitCode: 0 }); // bash: the last command's status (echo)
  });

  it.each([
    ["cols=0", "cols", "0"],
    ["cols=100000", "cols", "100000"],
    ["rows=x", "rows", "x"],
    ["colz=80", "colz", "80"],
  ])("refuses %s before the upgrade with a 400 naming %s", async (query, field, value) => {
    const r = await handshake(`/v1/sandboxes/${id}/terminal?${query}`, auth("alice"));
    expect(r.status).toBe(400);
    const body = JSON.parse(r.body);
    expect(body.error).toMatchObject({ code: "validation", details: { field } });
    expect(body.error.message).toContain(`${field}: invalid value "${value}"`);
  });

  it("answers another owner's sandbox exactly like a missing one (404), and no token with 401", async () => {
    const bob = await handshake(`/v1/sandboxes/${id}/terminal`, auth("bob"));
    const missing = await handshake("/v1/sandboxes/sbx-nonexistent00/terminal", auth("bob"));
    expect(bob.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(JSON.parse(bob.body).error.code).toBe("not_found");
    expect((await handshake(`/v1/sandboxes/${id}/terminal`, {})).status).toBe(401);
    // a GET without the upgrade: a 400 saying how to open it
    const plain = await fetch(`${base}/v1/sandboxes/${id}/terminal`, { headers: auth("alice") });
    expect(plain.status).toBe(400);
    expect(((await plain.json()) as { error: { details: { field: string } } }).error.details.field).toBe("upgrade");
    // an upgrade to a path nobody serves
    expect((await handshake("/v1/nothing-here", auth("alice"))).status).toBe(404);
  });

  it.each([
    ["not json", "frame"],
    [JSON.stringify({ type: "resize", cols: 0, rows: 24 }), "cols"],
    [JSON.stringify({ type: "launch" }), "type"],
  ])("a malformed control frame %s closes with 1008 naming %s; the service goes on", async (frame, field) => {
    const t = openTerminal(terminalQuery({ command: ["cat"] }));
    await t.opened;
    t.ws.send(frame);
    const closed = await t.waitClosed();
    expect(closed.code).toBe(1008);
    expect(closed.reason).toContain(field);
    const next = openTerminal(terminalQuery({ command: ["sh", "-c", "echo still-here"] }));
    await next.opened;
    await next.waitFor(/still-here/);
    await next.waitClosed();
  });

  it("over the per-owner bound a terminal is a 429 before anything starts; closing one makes room", async () => {
    const ts = [0, 1, 2].map(() => openTerminal(terminalQuery({ command: ["cat"] })));
    await Promise.all(ts.map((t) => t.opened));
    const refused = await handshake(`/v1/sandboxes/${id}/terminal`, auth("alice"));
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body).error.message).toContain("terminals: 3 of yours are open");
    // another owner is not counted against alice (and still gets the 404 for her sandbox)
    expect((await handshake(`/v1/sandboxes/${id}/terminal`, auth("bob"))).status).toBe(404);
    ts[0].ws.close();
    await ts[0].waitClosed();
    // the service sees the close a moment after the client does: retry a refusal until then
    const next = await until("room for a terminal", async () => {
      const t = openTerminal(terminalQuery({ command: ["sh", "-c", "echo room-again"] }));
      return t.opened.then(
        () => t,
        () => undefined,
      );
    });
    await next.waitFor(/room-again/);
    await next.waitClosed();
    for (const t of ts.slice(1)) t.ws.close();
    await Promise.all(ts.slice(1).map((t) => t.waitClosed()));
  });

  it("a client that never reads stalls the command (bounded buffers); closing it leaves nothing running", async () => {
    const baseline = await processCount();
    // writes 64 KiB pieces as fast as it may, recording how many bytes got out
    const writer =
      "import os,sys\nn=0\nb=b'x'*65536\nwhile True:\n    os.write(1,b); n+=len(b)\n    open('/tmp/written','w').write(str(n))\n";
    const q = terminalQuery({ command: ["python3", "-c", writer] });
    const socket = await new Promise<Duplex>((resolve, reject) => {
      const req = http.request(`${base}/v1/sandboxes/${id}/terminal?${q}`, {
        headers: {
          ...auth("alice"),
          connection: "Upgrade",
          upgrade: "websocket",
          "sec-websocket-version": "13",
          "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
        agent: false,
      });
      req.on("upgrade", (_res, s) => resolve(s));
      req.on("response", (res) => reject(new Error(`refused: ${res.statusCode}`)));
      req.on("error", reject);
      req.end();
    });
    socket.pause(); // never read
    socket.on("error", () => undefined);
    const written = async () => {
      const res = await rt.app.inject({
        method: "POST",
        url: `/v1/sandboxes/${id}/exec`,
        headers: auth("alice"),
        payload: { command: ["sh", "-c", "cat /tmp/written 2>/dev/null || echo 0"] },
      });
      return Number(parseExecFrames(res.body).stdout.trim());
    };
    // the command stalls: two readings a second apart agree (and it did write something)
    const stalled = await until(
      "the writer to stall",
      async () => {
        const a = await written();
        await new Promise((r) => setTimeout(r, 1000));
        const b = await written();
        return a > 0 && a === b ? b : undefined;
      },
      60_000,
    );
    // what it got out is bounded by the kernel's socket buffers, the high water mark and the
    // pty's: tens of MiB at most; without backpressure it would be gigabytes by now
    expect(stalled).toBeLessThan(64 * 1024 * 1024);
    socket.destroy();
    await until("the sandbox back at its process count", async () =>
      (await processCount()) === baseline ? true : undefined,
    );
  }, 120_000);
});
