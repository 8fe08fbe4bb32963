// The envd protocol on the wire, below the SDK: the Connect framing of Start (start, data,
// keepalive, end, end-stream), what a wrong access token gets (nothing), 4xx for malformed
// requests, and the bounds on output nobody reads. Real sandboxes on the local platform.
import { request } from "node:http";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../runtime/core/log.ts";
import { registerEnvd } from "../../runtime/server/e2b/envd/plugin.ts";
import { envdAccess } from "../../runtime/server/e2b/plugin.ts";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let url: string;
let id: string;
let token: string;
/** a second envd app on the same Manager, with a 50 ms keepalive */
let fast: FastifyInstance;
let fastUrl: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  const res = await fetch(`${url}/v2/sandboxes`, {
    method: "POST",
    headers: { "x-api-key": TOKENS.alice, "content-type": "application/json" },
    body: JSON.stringify({ templateID: "base", timeout: 600 }),
  });
  expect(res.status).toBe(201);
  ({ sandboxID: id, envdAccessToken: token } = (await res.json()) as { sandboxID: string; envdAccessToken: string });
  fast = Fastify();
  const access = envdAccess(rt.manager);
  registerEnvd(fast, { manager: rt.manager, access, logger: silentLogger() }, { keepaliveMs: 50 });
  fastUrl = await fast.listen({ host: "127.0.0.1", port: 0 });
}, 120_000);

afterAll(async () => {
  // as the service does after its drain period: streams a test abandoned must not hold close()
  fast?.server.closeAllConnections();
  rt?.app.server.closeAllConnections();
  await fast?.close();
  await rt?.close();
});

const headers = (over: Record<string, string> = {}) => ({ "e2b-sandbox-id": id, "x-access-token": token, ...over });

function envelope(msg: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

function frames(buf: Buffer): { flags: number; msg: any }[] {
  const out: { flags: number; msg: any }[] = [];
  for (let at = 0; at + 5 <= buf.length; ) {
    const len = buf.readUInt32BE(at + 1);
    out.push({ flags: buf[at]!, msg: JSON.parse(buf.subarray(at + 5, at + 5 + len).toString()) });
    at += 5 + len;
  }
  return out;
}

function start(base: string, cmd: string, over: Record<string, string> = {}, signal?: AbortSignal) {
  return fetch(`${base}/process.Process/Start`, {
    method: "POST",
    headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", ...headers(over) },
    body: envelope({ process: { cmd: "/bin/bash", args: ["-l", "-c", cmd] } }),
    signal,
  });
}

const unary = (path: string, body: unknown, over: Record<string, string> = {}) =>
  fetch(`${url}/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "connect-protocol-version": "1", ...headers(over) },
    body: JSON.stringify(body),
  });

describe("Connect framing of process.Process/Start", () => {
  it("start with a pid, data as produced, keepalives while idle, end with the code, end-stream", async () => {
    const res = await start(fastUrl, "printf out; printf err >&2; sleep 0.5; exit 7");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/connect+json");
    const fs = frames(Buffer.from(await res.arrayBuffer()));
    const events = fs.filter((f) => f.flags === 0).map((f) => f.msg.event);
    expect(events[0].start.pid).toBeGreaterThan(0);
    const data = (k: string) =>
      events
        .filter((e) => e.data?.[k])
        .map((e) => Buffer.from(e.data[k], "base64").toString())
        .join("");
    expect(data("stdout")).toBe("out");
    expect(data("stderr")).toBe("err");
    expect(events.filter((e) => e.keepalive).length).toBeGreaterThan(0);
    expect(events.at(-1).end).toEqual({ exitCode: 7, exited: true, status: "exit status 7" });
    expect(fs.at(-1)).toEqual({ flags: 2, msg: {} });
  });
});

describe("a wrong access token gets nothing", () => {
  const cases = {
    "a wrong token": { "x-access-token": `${token}x` },
    "no token": { "x-access-token": "" },
    "another sandbox's id": { "e2b-sandbox-id": "sbx-doesnotexist0000" },
  };

  it("no command runs, no file is read or written, the same answer as for a missing sandbox", async () => {
    for (const asked of Object.values(cases)) {
      const s = await start(url, "touch /workspace/intruder", asked);
      expect(s.status).toBe(401);
      const list = await unary("process.Process/List", {}, asked);
      expect(list.status).toBe(401);
      expect(await list.json()).toEqual({
        code: "unauthenticated",
        message: expect.stringContaining("X-Access-Token"),
      });
      const get = await fetch(`${url}/files?path=/etc/hostname`, { headers: headers(asked) });
      expect(get.status).toBe(401);
      const form = new FormData();
      form.append("file", new Blob(["pwned"]), "/workspace/intruder2");
      const post = await fetch(`${url}/files`, { method: "POST", headers: headers(asked), body: form });
      expect(post.status).toBe(401);
      expect((await fetch(`${url}/health`, { headers: headers(asked) })).status).toBe(502);
    }
    const check = await unary("filesystem.Filesystem/ListDir", { path: "/workspace", depth: 1 });
    const names = ((await check.json()) as { entries?: { name: string }[] }).entries?.map((e) => e.name) ?? [];
    expect(names).not.toContain("intruder");
    expect(names).not.toContain("intruder2");
    expect((await fetch(`${url}/health`, { headers: headers() })).status).toBe(204);
  });
});

describe("malformed requests are 4xx naming the problem", () => {
  it.each([
    ["Start without a command", "process.Process/List", null, 400],
    ["ListDir depth 0", "filesystem.Filesystem/ListDir", { path: "/workspace", depth: 0 }, 400],
    ["Stat with a NUL in the path", "filesystem.Filesystem/Stat", { path: "/work\u0000space" }, 400],
    [
      "SendInput to an unknown pid",
      "process.Process/SendInput",
      { process: { pid: 4 }, input: { stdin: "eA==" } },
      404,
    ],
    ["a field of the wrong type", "filesystem.Filesystem/Stat", { path: 7 }, 400],
  ])("%s", async (_name, path, body, status) => {
    const res =
      body === null
        ? await fetch(`${url}/${path}`, {
            method: "POST",
            headers: { "content-type": "application/json", ...headers() },
            body: "{not json",
          })
        : await unary(path, body);
    expect(res.status).toBe(status);
    const err = (await res.json()) as { code: string; message: string };
    expect(err.code).toMatch(/invalid_argument|not_found/);
    expect(err.message.length).toBeGreaterThan(5);
  });

  it("a truncated multipart upload is a 400 with E2B's body; a raw upload needs ?path=", async () => {
    const bad = await fetch(`${url}/files`, {
      method: "POST",
      headers: { "content-type": "multipart/form-data; boundary=XyZ", ...headers() },
      body: '--XyZ\r\nContent-Disposition: form-data; name="file"; filename="/workspace/t.txt"\r\n\r\nno end',
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ code: 400, message: expect.stringContaining("closing boundary") });
    const raw = await fetch(`${url}/files`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream", ...headers() },
      body: "x",
    });
    expect(raw.status).toBe(400);
    expect(((await raw.json()) as { message: string }).message).toContain("path");
    const dir = await fetch(`${url}/files?path=/workspace`, { headers: headers() });
    expect(dir.status).toBe(400);
  });
});

describe("output bounds", () => {
  it("a reader that does not read pauses the command instead of buffering its output", async () => {
    const marker = `/workspace/flood-${Date.now()}`;
    const ac = new AbortController();
    const before = process.memoryUsage().arrayBuffers;
    const res = await start(url, `head -c 200000000 /dev/zero; touch ${marker}`, {}, ac.signal);
    expect(res.status).toBe(200);
    // nothing reads the body: within a few seconds 200 MB cannot have gone anywhere, neither to
    // the command's end nor into the service's memory (the response's buffer: the service and
    // this test share the process); unbounded, tens of MB pile up in that time (76 MB measured)
    await new Promise((r) => setTimeout(r, 3000));
    const grown = process.memoryUsage().arrayBuffers - before;
    const stat = await unary("filesystem.Filesystem/Stat", { path: marker });
    expect(stat.status).toBe(404);
    expect(grown).toBeLessThan(24 * 1024 * 1024); // bounded: about 3 MB (the feed and socket buffers)
    ac.abort();
    await res.body?.cancel().catch(() => undefined);
  });

  it("a command nobody is attached to drains its output and runs to its end", async () => {
    const marker = `/workspace/detached-${Date.now()}`;
    // node:http, so the socket really closes (fetch may read a cancelled body to its end)
    await new Promise<void>((resolve, reject) => {
      const req = request(`${url}/process.Process/Start`, {
        method: "POST",
        headers: { "content-type": "application/connect+json", ...headers() },
      });
      req.on("error", () => undefined); // destroyed on purpose below
      req.on("response", (res) => {
        res.once("data", () => {
          req.destroy(); // the start event arrived: the command runs; now nobody reads it
          resolve();
        });
        res.on("error", () => undefined);
      });
      req.once("error", reject);
      req.end(
        envelope({ process: { cmd: "/bin/bash", args: ["-l", "-c", `head -c 200000000 /dev/zero; touch ${marker}`] } }),
      );
    });
    await expect
      .poll(async () => (await unary("filesystem.Filesystem/Stat", { path: marker })).status, { timeout: 60_000 })
      .toBe(200);
  });
});
