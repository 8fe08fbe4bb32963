// A device, FIFO or socket is not a file (issue 39): a download of one is a 400 naming the path,
// before any byte, on both surfaces, on the real local backend. Before, envd's GET /files of
// /dev/zero streamed zeros forever, and GET /v1/.../files answered 200 with an archive holding a
// device node, which no unprivileged extract can recreate. Inside a directory such entries stay
// what tar makes of them; only the path asked for is checked.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auth, createE2bSandbox, type LocalRuntime, shIn, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
let id: string;
let envd: Record<string, string>;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" } });
  const made = await createE2bSandbox(rt);
  id = made.id;
  envd = { "e2b-sandbox-id": id, "x-access-token": made.envdAccessToken };
  const files = await shIn(
    rt,
    id,
    "mkfifo /workspace/fifo && ln -s /dev/zero /workspace/zero-link && mkdir /workspace/with-fifo && mkfifo /workspace/with-fifo/p && echo ok > /workspace/plain",
  );
  expect(files.exit, files.stderr).toMatchObject({ exitCode: 0 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

const SPECIAL = ["/dev/zero", "/dev/urandom", "/dev/null", "/workspace/fifo"];

describe("a device, FIFO or socket is not a file", () => {
  it.each([...SPECIAL, "/workspace/zero-link"])("envd GET /files?path=%s: 400 naming the path", async (path) => {
    const res = await rt.app.inject({ method: "GET", url: "/files", query: { path }, headers: envd });
    expect(res.statusCode, res.body.slice(0, 300)).toBe(400);
    expect(res.json()).toMatchObject({ code: 400, message: expect.stringContaining(JSON.stringify(path)) });
    expect(res.json().message).toContain("device, FIFO or socket");
  });

  it.each(SPECIAL)("GET /v1/sandboxes/:id/files?path=%s: 400 naming the path", async (path) => {
    const res = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${id}/files`,
      query: { path },
      headers: auth("alice"),
    });
    expect(res.statusCode, res.body.slice(0, 300)).toBe(400);
    expect(res.json().error).toMatchObject({ code: "validation", details: { field: "path", value: path } });
    expect(res.json().error.message).toContain("device, FIFO or socket");
  });

  it("a regular file, a symlink to a device (archived as the link) and a directory holding a FIFO still download", async () => {
    const file = await rt.app.inject({
      method: "GET",
      url: "/files",
      query: { path: "/workspace/plain" },
      headers: envd,
    });
    expect(file.statusCode).toBe(200);
    expect(file.body).toBe("ok\n");
    for (const path of ["/workspace/zero-link", "/workspace/with-fifo"]) {
      const res = await rt.app.inject({
        method: "GET",
        url: `/v1/sandboxes/${id}/files`,
        query: { path },
        headers: auth("alice"),
      });
      expect(res.statusCode, `${path}: ${res.body.slice(0, 300)}`).toBe(200);
      expect(res.headers["content-type"]).toBe("application/x-tar");
    }
  });
});
