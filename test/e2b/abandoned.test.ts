// Nothing a client abandons may hold up the sandbox's next request (issue 39: after an abandoned
// /dev/zero read and six refused uploads, a 2-byte text/plain upload got no answer in 20 s).
// The cause: envd answered a refused upload at once but kept the connection alive with the
// declared body still owed, so a client reusing it had its next request read as that body.
// Here, on the real local backend over real sockets: two large downloads abandoned mid-stream
// (envd GET /files and GET /v1 files), then refused uploads sent the way a pooling client
// sends them (the next request on the same connection while the server keeps it open), then
// an upload in the same sandbox must be answered; and no reader of the abandoned downloads
// may be left running in the sandbox.
import http from "node:http";
import net from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createE2bSandbox, type LocalRuntime, shIn, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let url: string;
let port: number;
let id: string;
let token: string;

/** Generous: each request alone answers in well under a second. */
const ANSWER_WITHIN_MS = 15_000;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" } });
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  port = Number(new URL(url).port);
  ({ id, envdAccessToken: token } = await createE2bSandbox(rt));
  // 4 GiB sparse: far more than the test reads, and no disk used
  expect((await sh("truncate -s 4G /workspace/big && echo made")).stdout).toBe("made\n");
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

const sh = (script: string) => shIn(rt, id, script);

/** GETs `path`, reads `bytes` of the body, then drops the connection. */
function abandonDownload(path: string, headers: Record<string, string>, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}${path}`, { headers, agent: false }, (res) => {
      expect(res.statusCode).toBe(200);
      let seen = 0;
      res.on("error", () => undefined);
      res.on("data", (c: Buffer) => {
        seen += c.length;
        if (seen >= bytes) {
          req.destroy();
          resolve(seen);
        }
      });
    });
    req.on("error", (err) => (req.destroyed ? undefined : reject(err)));
  });
}

/**
 * A client that reuses its connection while the server keeps it open: writes each request
 * (head and the body bytes it chose to send) and reads one answer, on one socket, opening a
 * new one only when the server closed it.
 */
class ReusingClient {
  private socket?: net.Socket;
  private text = "";
  private closed = true;

  async send(request: Buffer): Promise<{ status: number; reused: boolean }> {
    const reused = !this.closed;
    if (this.closed) this.open();
    this.text = "";
    this.socket!.write(request);
    const status = await this.answer();
    return { status, reused };
  }

  close(): void {
    this.socket?.destroy();
  }

  private open(): void {
    const s = net.connect(port, "127.0.0.1");
    this.closed = false;
    s.on("data", (d) => (this.text += d.toString()));
    s.on("error", () => undefined);
    s.on("close", () => (this.closed = true));
    this.socket = s;
  }

  private answer(): Promise<number> {
    return new Promise((resolve, reject) => {
      const end = Date.now() + ANSWER_WITHIN_MS;
      const poll = () => {
        const at = this.text.indexOf("\r\n\r\n");
        const len = Number(/content-length: (\d+)/i.exec(this.text)?.[1] ?? Number.NaN);
        if (at >= 0 && this.text.length - at - 4 >= len) return resolve(Number(this.text.slice(9, 12)));
        if (Date.now() > end) return reject(new Error(`no answer within ${ANSWER_WITHIN_MS} ms: ${this.text}`));
        setTimeout(poll, 20);
      };
      poll();
    });
  }
}

const upload = (path: string, headers: string, body: Buffer | string, declared = Buffer.byteLength(body)) =>
  Buffer.concat([
    Buffer.from(
      `POST /files?path=${path} HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ${id}\r\nX-Access-Token: ${token}\r\n${headers}Content-Length: ${declared}\r\n\r\n`,
    ),
    Buffer.from(body),
  ]);

describe("after abandoned downloads and refused uploads", () => {
  it("an upload in the same sandbox is answered, and no abandoned reader is left running", async () => {
    const envd = { "e2b-sandbox-id": id, "x-access-token": token };
    expect(await abandonDownload("/files?path=/workspace/big", envd, 8 * 1024 * 1024)).toBeGreaterThan(0);
    const bearer = { authorization: `Bearer ${TOKENS.alice}` };
    // at least what was asked for: the last chunk read may run past it
    expect(
      await abandonDownload(`/v1/sandboxes/${id}/files?path=/workspace/big`, bearer, 8 * 1024 * 1024),
    ).toBeGreaterThanOrEqual(8 * 1024 * 1024);

    const client = new ReusingClient();
    const octet = "Content-Type: application/octet-stream\r\n";
    const refused: [string, Buffer, number][] = [
      ["declared 2 GiB, 2 bytes sent", upload("/workspace/x", octet, "ab", 2 ** 31), 413],
      ["a directory as the destination", upload("/workspace", octet, "hi"), 400],
      ["multipart without a boundary", upload("/workspace/x", "Content-Type: multipart/form-data\r\n", "zz"), 400],
      ["not gzip", upload("/workspace/g", `${octet}Content-Encoding: gzip\r\n`, "not gzip"), 400],
      ["unknown user", upload("/workspace/x&username=mallory", octet, "hi"), 400],
    ];
    const seen: string[] = [];
    for (const [name, request, status] of refused) {
      const got = await client.send(request);
      seen.push(`${name}: ${got.status}`);
      expect(got.status, seen.join("; ")).toBe(status);
    }
    const text = await client.send(upload("/workspace/t.txt", "Content-Type: text/plain\r\n", "hi"));
    expect(text.status, seen.join("; ")).toBe(200);
    const gzip = gzipSync("zipped");
    const zipped = await client.send(upload("/workspace/z.txt", `${octet}Content-Encoding: gzip\r\n`, gzip));
    client.close();
    expect(zipped.status).toBe(200);
    expect((await sh("cat /workspace/t.txt /workspace/z.txt")).stdout).toBe("hizipped");

    // the readers of the abandoned downloads (cat for envd, tar for /v1) were killed
    await expect
      .poll(async () => (await sh("pgrep -a -x cat; pgrep -a -x tar; true")).stdout, { timeout: ANSWER_WITHIN_MS })
      .toBe("");
  });
});
