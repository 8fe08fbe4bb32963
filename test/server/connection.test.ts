// Refusals that happen at the connection level, over a real socket (inject() bypasses Node's
// HTTP parser): a 10 MB body gets a 413 the client can read, oversized headers a 431, an
// over-long path a 414, a malformed request a 400, all with our JSON error body; ids of up to
// 253 characters reach the route (404 for a missing one, not 414); and the service goes on.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { type Service, startService } from "../../runtime/server/service.ts";
import { localConfig, TOKENS, testTokens } from "../support/local.ts";

let svc: Service;
let cleanup: () => void;
let port: number;

beforeAll(async () => {
  const made = localConfig();
  cleanup = made.cleanup;
  const logger = silentLogger();
  svc = await startService({
    config: made.config,
    tokens: testTokens(),
    logger,
    clock: systemClock,
    platform: createLocalPlatform(made.config, { logger, clock: systemClock }),
    port: 0,
    drainMs: 2000,
  });
  port = Number(new URL(svc.url).port);
});
afterAll(async () => {
  await svc?.close();
  cleanup?.();
});

interface RawAnswer {
  status: number;
  headers: string;
  body: string;
  /** an error on our side of the socket (EPIPE, ECONNRESET) while sending */
  socketError?: string;
}

/** Sends head (and body) on a fresh connection and reads until the server closes it or answers. */
function raw(head: string, body?: Buffer): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let socketError: string | undefined;
    s.on("data", (d) => {
      chunks.push(d);
      // one answer is all we want: stop once its body is complete
      const text = Buffer.concat(chunks).toString();
      const len = /content-length: (\d+)/i.exec(text)?.[1];
      const at = text.indexOf("\r\n\r\n");
      if (len !== undefined && at >= 0 && Buffer.byteLength(text.slice(at + 4)) >= Number(len)) s.end();
    });
    s.on("error", (e: NodeJS.ErrnoException) => (socketError = e.code ?? e.message));
    s.on("close", () => {
      const text = Buffer.concat(chunks).toString();
      const at = text.indexOf("\r\n\r\n");
      if (at < 0)
        return reject(
          new Error(`no answer (socket error: ${socketError ?? "none"}): ${JSON.stringify(text.slice(0, 200))}`),
        );
      resolve({ status: Number(text.slice(9, 12)), headers: text.slice(0, at), body: text.slice(at + 4), socketError });
    });
    s.write(head);
    if (body) s.write(body);
  });
}

const ours = (body: string) => {
  const parsed = JSON.parse(body);
  expect(parsed).toEqual({
    error: { code: expect.any(String), message: expect.any(String), details: expect.any(Object) },
  });
  return parsed.error as { code: string; message: string; details: Record<string, unknown> };
};

const AUTH = `Authorization: Bearer ${TOKENS.alice}\r\n`;
const TEN_MB = Buffer.alloc(10 * 1024 * 1024, "a");

describe("connection-level refusals answer with our JSON error body", () => {
  it("a 10 MB exec body: 413 the client can read, through fetch", async () => {
    const res = await fetch(`${svc.url}/v1/sandboxes/sbx-aaaaaaaaaaaaaaaa/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKENS.alice}`, "content-type": "application/json" },
      body: JSON.stringify({ command: ["echo", "x".repeat(TEN_MB.length)] }),
    });
    expect(res.status).toBe(413);
    const err = ours(await res.text());
    expect(err).toMatchObject({ code: "too_large", details: { field: "body" } });
    expect(err.message).toContain("larger than the limit of");
  });

  it("a 10 MB body with Content-Length, and one chunked: 413 after the body was read, no reset", async () => {
    const withLength = await raw(
      `POST /v1/sandboxes/sbx-aaaaaaaaaaaaaaaa/exec HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: ${TEN_MB.length}\r\n\r\n`,
      TEN_MB,
    );
    expect(withLength).toMatchObject({ status: 413, socketError: undefined });
    expect(ours(withLength.body).code).toBe("too_large");
    const chunked = await raw(
      `POST /v1/sandboxes/sbx-aaaaaaaaaaaaaaaa/exec HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${TEN_MB.length.toString(16)}\r\n`,
      Buffer.concat([TEN_MB, Buffer.from("\r\n0\r\n\r\n")]),
    );
    expect(chunked).toMatchObject({ status: 413, socketError: undefined });
    expect(ours(chunked.body).code).toBe("too_large");
  });

  it("headers over 16 KiB: 431", async () => {
    const res = await raw(`GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n${AUTH}X-Big: ${"a".repeat(20_000)}\r\n\r\n`);
    expect(res.status).toBe(431);
    expect(ours(res.body)).toMatchObject({ code: "too_large", details: { parser: "HPE_HEADER_OVERFLOW" } });
    expect(res.headers).toMatch(/connection: close/i);
  });

  it("a URL over the header limit: 431 too; an over-long path parameter: 414", async () => {
    expect((await raw(`GET /v1/sandboxes/${"a".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n${AUTH}\r\n`)).status).toBe(431);
    const long = await raw(`GET /v1/sandboxes/${"a".repeat(2000)} HTTP/1.1\r\nHost: x\r\n${AUTH}\r\n`);
    expect(long.status).toBe(414);
    expect(ours(long.body)).toMatchObject({ code: "validation", details: { field: "params" } });
  });

  it.each([101, 200, 253])("an id of %i characters reaches the route (404 not found, not 414)", async (n) => {
    const res = await raw(`GET /v1/sandboxes/${"a".repeat(n)} HTTP/1.1\r\nHost: x\r\n${AUTH}Connection: close\r\n\r\n`);
    expect(res.status).toBe(404);
    expect(ours(res.body).code).toBe("not_found");
  });

  it("an id of 254 characters: 400 naming params.id", async () => {
    const res = await raw(
      `GET /v1/sandboxes/${"a".repeat(254)} HTTP/1.1\r\nHost: x\r\n${AUTH}Connection: close\r\n\r\n`,
    );
    expect(res.status).toBe(400);
    expect(ours(res.body)).toMatchObject({ code: "validation", details: { field: "params.id" } });
  });

  it.each([
    ["a malformed request line", "GARBAGE\r\n\r\n", 400],
    [
      "a bad chunked framing",
      `POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
      400,
    ],
    [
      "bad percent-encoding in the path",
      `GET /v1/sandboxes/%zz HTTP/1.1\r\nHost: x\r\n${AUTH}Connection: close\r\n\r\n`,
      400,
    ],
    ["no token", "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 401],
    ["an unknown route", `GET /v1/nothing HTTP/1.1\r\nHost: x\r\n${AUTH}Connection: close\r\n\r\n`, 404],
  ])("%s", async (_name, head, status) => {
    const res = await raw(head);
    expect(res.status).toBe(status);
    expect(ours(res.body).message.length).toBeGreaterThan(10);
  });

  it("the service still answers", async () => {
    expect((await fetch(`${svc.url}/healthz`)).status).toBe(200);
    const list = await fetch(`${svc.url}/v1/sandboxes`, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
    expect(await list.json()).toEqual({ sandboxes: [] });
  });
});
