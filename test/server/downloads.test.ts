// Downloads that fail say so (issue 10 item 7), through the service on the REAL local backend:
// a missing or unreadable path is refused before any byte with our JSON error; a tar that dies
// mid-stream cuts the response (a plain HTTP client sees it, no trailer, and the bytes it got
// are no complete archive) and makes our HTTP client throw; a complete one ends with the
// trailer. The mid-stream failure is made deterministic by holding the response unread while
// the sandbox's tar is killed, so tar cannot have finished first.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { type IncomingMessage, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpManager } from "../../runtime/client/http.ts";
import {
  auth,
  createReadySandbox,
  type LocalRuntime,
  parseExecFrames,
  startLocalRuntime,
  TOKENS,
} from "../support/local.ts";

let rt: LocalRuntime;
let url: string;
let id: string;
let work: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-downloads-"));
  rt = await startLocalRuntime();
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  id = await createReadySandbox(rt);
  // a 4 GiB sparse file (no disk used): tar needs seconds to read it, far longer than the tests take to kill it
  await sh(
    "mkdir -p /workspace/d /workspace/closed && echo ok > /workspace/d/a && echo secret > /workspace/d/b && chmod 000 /workspace/d/b /workspace/closed && truncate -s 4G /workspace/huge && head -c 3000000 /dev/urandom > /workspace/some",
  );
}, 120_000);

afterAll(async () => {
  await rt?.close();
  rmSync(work, { recursive: true, force: true });
});

async function sh(script: string): Promise<{ stdout: string; exitCode?: number }> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", script], timeoutMs: 60_000 },
  });
  const f = parseExecFrames(res.body);
  if (f.error) throw new Error(`exec ${script}: ${f.error.message}`);
  return { stdout: f.stdout, exitCode: f.exit?.exitCode };
}

/** Kills the sandbox's tar (the download's producer); exactly one must have been running. */
async function killTar(): Promise<void> {
  const r = await sh("pkill -KILL -x tar; echo $?");
  expect(r.stdout.trim(), "pkill found the download's tar").toBe("0");
}

interface Raw {
  status: number;
  body: Buffer;
  /** the response ended with its terminating chunk */
  complete: boolean;
  trailers: NodeJS.Dict<string>;
  error?: string;
}

/** A plain HTTP GET (node:http, no client of ours); `onFirst` runs with the response paused after its first chunk. */
function rawGet(path: string, onFirst?: () => Promise<void>): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`,
      { headers: auth("alice") },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let first = true;
        let error: string | undefined;
        const done = () =>
          resolve({
            status: res.statusCode!,
            body: Buffer.concat(chunks),
            complete: res.complete,
            trailers: res.trailers,
            error,
          });
        res.on("data", (c: Buffer) => {
          chunks.push(c);
          if (!first || !onFirst) return;
          first = false;
          res.pause();
          onFirst().then(() => res.resume(), reject);
        });
        res.on("error", (e) => (error = e.message));
        res.on("close", done);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** `tar -t` of what arrived: exit code and stderr. */
function listArchive(bytes: Buffer): { status: number | null; stderr: string } {
  const file = join(work, `got-${Date.now()}.tar`);
  writeFileSync(file, bytes);
  const r = spawnSync("tar", ["-tf", file], { encoding: "utf8" });
  return { status: r.status, stderr: r.stderr };
}

describe("downloads that fail say so", () => {
  it.each([
    {
      path: "/etc/shadow",
      status: 400,
      code: "validation",
      says: ['path: invalid value "/etc/shadow"', "it is not readable by the sandbox's user (permission denied)"],
    },
    {
      path: "/workspace/d",
      status: 400,
      code: "validation",
      says: ['"/workspace/d/b" under it is not readable', "chmod"],
    },
    {
      path: "/workspace/closed",
      status: 400,
      code: "validation",
      says: ['path: invalid value "/workspace/closed"', "not readable"],
    },
    {
      path: "/workspace/missing",
      status: 404,
      code: "not_found",
      says: ['path "/workspace/missing" not found: no such file or directory in the sandbox', "ls -la /workspace"],
    },
  ])("GET $path: $status before any byte, naming the path and why", async ({ path, status, code, says }) => {
    const res = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`,
      headers: auth("alice"),
    });
    expect(res.statusCode, res.body).toBe(status);
    expect(res.headers["content-type"]).toContain("application/json");
    const body = res.json();
    expect(body.error.code).toBe(code);
    for (const s of says) expect(body.error.message).toContain(s);
    expect(body.error.details).toMatchObject({ value: path });
  });

  it("a complete download ends with the trailer sbx-archive: complete, to a plain HTTP client", async () => {
    const r = await rawGet("/workspace/some");
    expect(r.status).toBe(200);
    expect(r.error).toBeUndefined();
    expect(r.complete).toBe(true);
    expect(r.trailers["sbx-archive"]).toBe("complete");
    expect(execFileSync("tar", ["-tvf", "-"], { input: r.body, encoding: "utf8" })).toMatch(/3000000 .* some\n$/);
  });

  it("a tar that dies mid-stream cuts the response: no terminating chunk, no trailer, no complete archive", async () => {
    const r = await rawGet("/workspace/huge", killTar);
    expect(r.status).toBe(200);
    expect(r.complete, "the response must not end cleanly").toBe(false);
    expect(r.error).toBe("aborted");
    expect(r.trailers["sbx-archive"]).toBeUndefined();
    expect(r.body.length).toBeGreaterThan(0);
    expect(r.body.length).toBeLessThan(4 * 1024 ** 3);
    const listed = listArchive(r.body);
    expect(listed.status, "tar must reject the bytes that arrived").not.toBe(0);
    expect(listed.stderr).toMatch(/Unexpected EOF/);
  }, 60_000);

  it("our HTTP client throws on a download cut mid-stream, naming it and how far it got", async () => {
    const client = new HttpManager({ server: url, token: TOKENS.alice });
    const stream = await client.getArchive("alice", id, "/workspace/huge");
    const failed = new Promise<Error>((resolve) => stream.on("error", resolve));
    await new Promise<void>((resolve) =>
      stream.once("data", () => {
        stream.pause();
        resolve();
      }),
    );
    await killTar();
    stream.resume();
    const err = await failed;
    expect(err).toMatchObject({ code: "upstream" });
    expect(err.message).toMatch(
      new RegExp(
        `^download of ${id}:/workspace/huge broke off after \\d+ bytes \\(.*\\): .*the archive is incomplete, retry the copy$`,
      ),
    );
  }, 60_000);
});
