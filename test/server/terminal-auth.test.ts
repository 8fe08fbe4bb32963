// Browser authentication for the terminal websocket (docs/terminals.md, "From a browser"): the
// token offered as the subprotocol sbx.bearer.<base64url token> beside sbx.terminal.v1, checked
// exactly as an Authorization header is (static tokens and JWTs from a real test issuer, the same
// 401 and 404 answers before the upgrade), the answer selecting sbx.terminal.v1 alone, and the
// token in no log line. A real `ws` client against the real service on the local platform.
import http from "node:http";
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BEARER_PROTOCOL_PREFIX, bearerProtocol, TERMINAL_PROTOCOL } from "../../runtime/core/terminal.ts";
import { TestIssuer } from "../auth/issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "../auth/support.ts";
import { TOKENS } from "../support/local.ts";

interface WsClient {
  readonly protocol: string;
  send(data: string | Buffer): void;
  close(): void;
  on(event: "message", fn: (data: Buffer, isBinary: boolean) => void): WsClient;
  on(event: "error", fn: (err: Error) => void): WsClient;
  once(event: "open", fn: () => void): WsClient;
  once(event: "close", fn: () => void): WsClient;
  once(event: "upgrade", fn: (res: http.IncomingMessage) => void): WsClient;
}
const WebSocket = createRequire(import.meta.url)("ws") as new (
  url: string,
  protocols: string[],
  opts?: { headers?: Record<string, string> },
) => WsClient;

let issuer: TestIssuer;
let t: AuthApp;
let base = "";
let jwt = "";
let jwtOwner = "";
const ids = { alice: "", jwt: "" };

beforeAll(async () => {
  issuer = await new TestIssuer().start();
  t = await startAuthApp([issuerEntry("idp", issuer.url)]);
  base = await t.app.listen({ host: "127.0.0.1", port: 0 });
  jwt = issuer.token({ sub: "carol" });
  jwtOwner = (await t.identities.identify(jwt)).owner;
  for (const [key, owner] of [
    ["alice", "alice"],
    ["jwt", jwtOwner],
  ] as const) {
    ids[key] = (await t.rt.manager.create({ owner, profile: "base", size: "nano" })).id;
    await t.rt.manager.wait(owner, ids[key], { timeoutMs: 60_000 });
  }
}, 120_000);

afterAll(async () => {
  await t?.close();
  await issuer?.close();
});

/** Polls until `ok()` returns a value; the bound is a safety net far above a normal wait, never the assertion. */
async function until<T>(what: string, ok: () => T | undefined, ms = 30_000): Promise<T> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    const v = ok();
    if (v !== undefined) return v;
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

const terminalUrl = (id: string) => `${base.replace("http", "ws")}/v1/sandboxes/${id}/terminal?cmd=sh`;

/** The raw answer to a handshake: a refusal is a plain HTTP response, an acceptance its 101 headers. */
function handshake(
  id: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/sandboxes/${id}/terminal?cmd=sh`, {
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
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on("error", reject);
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body: "" });
    });
    req.on("error", reject);
    req.end();
  });
}

/** The offer a browser makes, the bearer entry first: a server echoing the first offer would echo the token. */
const offer = (token: string) => ({ "sec-websocket-protocol": `${bearerProtocol(token)}, ${TERMINAL_PROTOCOL}` });

describe("the terminal websocket, authenticated by subprotocol", () => {
  it.each([
    ["a static token", () => TOKENS.alice, () => ids.alice],
    ["a JWT", () => jwt, () => ids.jwt],
  ])("%s opens a shell; the answer selects sbx.terminal.v1 alone", async (_what, token, id) => {
    const ws = new WebSocket(terminalUrl(id()), [bearerProtocol(token()), TERMINAL_PROTOCOL]);
    let text = "";
    let answered: string | string[] | undefined;
    const errors: Error[] = [];
    ws.on("error", (e) => errors.push(e));
    ws.once("upgrade", (res) => (answered = res.headers["sec-websocket-protocol"]));
    ws.on("message", (data, isBinary) => {
      if (isBinary) text += data.toString();
    });
    await new Promise<void>((resolve, reject) => {
      ws.once("open", resolve);
      ws.on("error", reject);
    });
    expect(answered).toBe(TERMINAL_PROTOCOL);
    expect(ws.protocol).toBe(TERMINAL_PROTOCOL);
    ws.send(Buffer.from("echo hi-$((6*7))\n"));
    await until(`hi-42 on the terminal (it shows ${JSON.stringify(text.slice(-200))})`, () =>
      text.includes("hi-42") ? true : undefined,
    );
    const closed = new Promise<void>((r) => ws.once("close", r));
    ws.close();
    await closed;
    expect(errors).toEqual([]);
  });

  it("answers a 101 naming sbx.terminal.v1 and nothing of the token", async () => {
    const res = await handshake(ids.alice, offer(TOKENS.alice));
    expect(res.status).toBe(101);
    expect(res.headers["sec-websocket-protocol"]).toBe(TERMINAL_PROTOCOL);
  });

  it.each([
    ["a wrong static token", () => "token-mallory-0123456789"],
    ["an expired JWT", () => issuer.token({ sub: "carol", exp: Math.floor(Date.now() / 1000) - 600 })],
    ["a JWT of an unknown issuer", () => issuer.token({ iss: "https://elsewhere.example" })],
  ])("refuses %s with the Authorization header's own 401, before the upgrade", async (_what, token) => {
    const byHeader = await handshake(ids.alice, { authorization: `Bearer ${token()}` });
    const byProtocol = await handshake(ids.alice, offer(token()));
    expect(byProtocol.status).toBe(401);
    expect(byProtocol.body).toBe(byHeader.body);
    expect(byProtocol.headers["www-authenticate"]).toBe('Bearer realm="sbx"');
    expect(byProtocol.headers.upgrade).toBeUndefined();
  });

  it.each([
    ["bob's static token", () => TOKENS.bob, () => ids.alice],
    ["a JWT", () => jwt, () => ids.alice],
    ["alice's static token", () => TOKENS.alice, () => ids.jwt],
  ])("refuses %s another owner's sandbox with the API's 404", async (_what, token, id) => {
    const byProtocol = await handshake(id(), offer(token()));
    expect(byProtocol.status).toBe(404);
    expect(byProtocol.body).toBe((await handshake(id(), { authorization: `Bearer ${token()}` })).body);
    expect(JSON.parse(byProtocol.body).error.code).toBe("not_found");
  });

  it.each([
    ["the token without sbx.terminal.v1", bearerProtocol(TOKENS.alice), /offer sbx\.terminal\.v1 beside the token/],
    [
      "two tokens",
      `${bearerProtocol(TOKENS.alice)}, ${bearerProtocol(TOKENS.bob)}, ${TERMINAL_PROTOCOL}`,
      /offer one sbx\.bearer\.… entry/,
    ],
    [
      "a token that is not base64url",
      `${BEARER_PROTOCOL_PREFIX}${TOKENS.alice}.x, ${TERMINAL_PROTOCOL}`,
      /unpadded base64url/,
    ],
  ])("refuses %s with a 400 naming Sec-WebSocket-Protocol, the token elided", async (_what, protocols, fix) => {
    const res = await handshake(ids.alice, { "sec-websocket-protocol": protocols });
    expect(res.status).toBe(400);
    const { error } = JSON.parse(res.body);
    expect(error.message).toMatch(/^Sec-WebSocket-Protocol: invalid value "[^"]*sbx\.bearer\.…/);
    expect(error.message).toMatch(fix);
    expect(res.body).not.toContain(TOKENS.alice);
    expect(res.body).not.toContain(bearerProtocol(TOKENS.alice));
  });

  it("refuses a token in both the Authorization header and the subprotocol", async () => {
    const res = await handshake(ids.alice, { ...offer(TOKENS.alice), authorization: `Bearer ${TOKENS.alice}` });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body).error.message).toMatch(/send the token once/);
  });

  it("still takes Authorization: Bearer, with or without sbx.terminal.v1 offered", async () => {
    const plain = await handshake(ids.alice, { authorization: `Bearer ${TOKENS.alice}` });
    expect([plain.status, plain.headers["sec-websocket-protocol"]]).toEqual([101, undefined]);
    const named = await handshake(ids.alice, {
      authorization: `Bearer ${TOKENS.alice}`,
      "sec-websocket-protocol": TERMINAL_PROTOCOL,
    });
    expect([named.status, named.headers["sec-websocket-protocol"]]).toEqual([101, TERMINAL_PROTOCOL]);
  });

  it("wrote no token into any log line", () => {
    const logged = JSON.stringify(t.logs);
    for (const token of [TOKENS.alice, TOKENS.bob, jwt])
      for (const shown of [token, bearerProtocol(token).slice(BEARER_PROTOCOL_PREFIX.length)])
        expect(logged).not.toContain(shown);
  });
});
