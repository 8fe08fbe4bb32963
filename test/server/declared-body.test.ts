// A body declared over a route's limit (issue 39: `PUT .../files` with Content-Length 2 GiB got a
// reset and no answer) is refused with a 413 in the surface's JSON error at once, before any
// byte of it is read, and the connection is closed after the answer: with `Expect:
// 100-continue` no 100 goes out, and without it the client that sends nothing is not left
// waiting for a drain. Over a real socket (inject() bypasses Node's HTTP parser and the
// interim 100). Every route that takes a body: our API's JSON and tar routes, the E2B REST
// routes, envd's POST /files and its Connect routes. A declared body within the limit still
// gets its 100 Continue and goes through.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createE2bSandbox,
  createReadySandbox,
  type LocalRuntime,
  startLocalRuntime,
  TOKENS,
} from "../support/local.ts";

let rt: LocalRuntime;
let port: number;
let id: string;
let envd: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" } });
  port = Number(new URL(await rt.app.listen({ host: "127.0.0.1", port: 0 })).port);
  id = await createReadySandbox(rt);
  const e2b = await createE2bSandbox(rt);
  envd = `E2b-Sandbox-Id: ${e2b.id}\r\nX-Access-Token: ${e2b.envdAccessToken}\r\n`;
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

/** Generous: the refusal needs no sandbox and no body; the old drain waited its full 10 s. */
const ANSWER_WITHIN_MS = 5000;
const TWO_GIB = 2 ** 31;

interface Exchange {
  /** everything the server wrote, 100 Continue included */
  text: string;
  status: number;
  body: string;
  /** the server closed the connection (we never do) */
  closed: boolean;
}

/** Writes only `head` (no body byte), reads until the server closes or the bound passes. */
function headOnly(head: string): Promise<Exchange> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let text = "";
    const done = (closed: boolean) => {
      clearTimeout(timer);
      s.destroy();
      const final = text.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, "");
      const at = final.indexOf("\r\n\r\n");
      resolve({ text, status: Number(final.slice(9, 12)), body: at < 0 ? "" : final.slice(at + 4), closed });
    };
    const timer = setTimeout(() => done(false), ANSWER_WITHIN_MS);
    s.on("data", (d) => (text += d.toString()));
    s.on("error", () => undefined); // a reset shows as no answer, which the test reports
    s.on("end", () => done(true));
    s.write(head);
  });
}

const bearer = `Authorization: Bearer ${TOKENS.alice}\r\n`;
const e2bKey = `X-API-KEY: ${TOKENS.alice}\r\n`;
const declared = (n: number, expect: boolean) =>
  `Content-Length: ${n}\r\n${expect ? "Expect: 100-continue\r\n" : ""}Host: x\r\n\r\n`;

const ROUTES = [
  {
    name: "PUT /v1/sandboxes/:id/files (tar)",
    head: () =>
      `PUT /v1/sandboxes/${id}/files?path=/workspace HTTP/1.1\r\n${bearer}Content-Type: application/x-tar\r\n`,
    limit: 512 * 1024 * 1024,
    surface: "sbx",
  },
  {
    name: "POST /v1/sandboxes/:id/exec (JSON)",
    head: () => `POST /v1/sandboxes/${id}/exec HTTP/1.1\r\n${bearer}Content-Type: application/json\r\n`,
    limit: 8 * 1024 * 1024,
    surface: "sbx",
  },
  {
    name: "POST /v2/sandboxes (E2B REST)",
    head: () => `POST /v2/sandboxes HTTP/1.1\r\n${e2bKey}Content-Type: application/json\r\n`,
    limit: 8 * 1024 * 1024,
    surface: "e2b",
  },
  {
    name: "envd POST /files",
    head: () => `POST /files?path=/workspace/big HTTP/1.1\r\n${envd}Content-Type: application/octet-stream\r\n`,
    limit: 512 * 1024 * 1024,
    surface: "e2b",
  },
  {
    name: "envd Connect filesystem.Filesystem/Stat",
    head: () => `POST /filesystem.Filesystem/Stat HTTP/1.1\r\n${envd}Content-Type: application/json\r\n`,
    limit: 8 * 1024 * 1024,
    surface: "e2b",
  },
] as const;

const CASES = ROUTES.flatMap((r) => [true, false].map((expectContinue) => ({ ...r, expectContinue })));

describe("a body declared over the limit", () => {
  it.each(CASES)("$name, Expect: 100-continue $expectContinue: 413 at once, no 100, closed", async (c) => {
    const ex = await headOnly(`${c.head()}${declared(TWO_GIB, c.expectContinue)}`);
    expect(ex.text, "the server answered without waiting for a body").not.toBe("");
    expect(ex.text).not.toContain("100 Continue");
    expect(ex.status, ex.text.slice(0, 300)).toBe(413);
    const body = JSON.parse(ex.body);
    const message = c.surface === "sbx" ? body.error.message : body.message;
    if (c.surface === "sbx")
      expect(body).toEqual({
        error: {
          code: "too_large",
          message: expect.any(String),
          details: { field: "body", limitBytes: c.limit, declaredBytes: TWO_GIB },
        },
      });
    else expect(body).toEqual({ code: 413, message: expect.any(String) });
    expect(message).toContain(`larger than the limit of ${c.limit} bytes (Content-Length declares ${TWO_GIB})`);
    expect(message).toContain(`send at most ${c.limit} bytes`);
    expect(ex.closed, "the server closed the connection after the answer").toBe(true);
  });

  it("a client that streams the body while reading gets the 413, and the server stops reading", async () => {
    const got = await new Promise<{ text: string; sent: number }>((resolve) => {
      const s = net.connect(port, "127.0.0.1");
      let text = "";
      let sent = 0;
      s.on("data", (d) => (text += d.toString()));
      s.on("error", () => undefined); // EPIPE/ECONNRESET once the server closed: expected
      s.on("close", () => resolve({ text, sent }));
      s.write(`${ROUTES[0].head()}${declared(TWO_GIB, false)}`);
      const chunk = Buffer.alloc(64 * 1024, 1);
      const pump = () => {
        while (!s.destroyed && sent < TWO_GIB) {
          sent += chunk.length;
          if (!s.write(chunk)) return void s.once("drain", pump);
        }
      };
      pump();
    });
    expect(got.text).toMatch(/^HTTP\/1\.1 413 /);
    // the old refusal read 64 MiB (the drain bound) before closing
    expect(got.sent, "the server closed long before 2 GiB").toBeLessThan(32 * 1024 * 1024);
  });
});

describe("Expect: 100-continue is answered when the body is wanted, and only then", () => {
  it("a tar within the limit: 100 Continue, then the upload goes through", async () => {
    const tar = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${id}/files?path=/etc/hostname`,
      headers: { authorization: `Bearer ${TOKENS.alice}` },
    });
    expect(tar.statusCode).toBe(200);
    const archive = tar.rawPayload;
    const s = net.connect(port, "127.0.0.1");
    let text = "";
    s.on("error", () => undefined);
    const answered = new Promise<void>((resolve) =>
      s.on("data", (d) => {
        text += d.toString();
        if (text === "HTTP/1.1 100 Continue\r\n\r\n") s.write(archive);
        if (/\r\n\r\n$/.test(text) && !text.endsWith("100 Continue\r\n\r\n")) resolve();
      }),
    );
    s.write(
      `PUT /v1/sandboxes/${id}/files?path=/workspace/continued HTTP/1.1\r\n${bearer}Content-Type: application/x-tar\r\n${declared(archive.length, true)}`,
    );
    await answered;
    s.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 204 /);
  });

  it("a refusal before the body is read (no token): the 401, no 100, and the connection closed", async () => {
    const ex = await headOnly(
      `PUT /v1/sandboxes/${id}/files?path=/workspace HTTP/1.1\r\nContent-Type: application/x-tar\r\n${declared(1024, true)}`,
    );
    expect(ex.text).not.toContain("100 Continue");
    expect(ex.status).toBe(401);
    expect(JSON.parse(ex.body).error.code).toBe("unauthenticated");
    expect(ex.closed).toBe(true);
  });
});
